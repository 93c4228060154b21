#!/usr/bin/python3
"""`make bench`: the Python package (python/, `import airlock`) against the
C library in the same run. Prints one table and one JSON line.

  tool_sync_us     a call_tool round trip guest -> sync Python function ->
                   guest, median over calls timed inside the guest (target < 30)
  tool_c_us        the same with a C callback tool (airlock_tool_fn), from C
  tool_async_us    the same with an `async def` tool run on the caller's
                   event loop (a run from Sandbox.arun): reported
  run_py_ms        Sandbox.run('print(1)') from Python, median, 50 ms apart
  run_c_ms         airlock_cache_run of print(1) from C (bench_python_c,
                   built here), the same spacing, in the same run
  ratio            run_py_ms / run_c_ms (target <= 1.1)
  inproc_*         the two alternating sample by sample in this process (the
                   C side through ctypes, for the bench only)

usage: bench/bench_python.py BUILD_DIR [--quick] [--tools]
  --tools  only the tool round trips (sync, C callback), each REPEAT times
           alternating, medians side by side: the quick figure while the
           tool path is worked on
"""
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build"))
quick = "--quick" in sys.argv
tools_only = "--tools" in sys.argv
sys.path.insert(0, os.path.join(ROOT, "python"))
import airlock  # noqa: E402

CALLS = 2000 if quick else 10000
RUNS = 100 if quick else 300
GAP_S = 0.05

C_SRC = r'''
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "airlock.h"
static double now_ms(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
        return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b;
        return x < y ? -1 : x > y; }
static int echo_tool(void *u, const char *a, char **res, char **err) {
        (void)u; (void)a; (void)err; *res = strdup("1"); return 0; }
int main(int argc, char **argv) {
        int runs = atoi(argv[1]); useconds_t gap = (useconds_t)atoi(argv[2]);
        airlock_error e; airlock_config *cfg; airlock_cache *c; airlock_result *r;
        /* The template program the Python package uses, so that only the
         * calling side differs. */
        if (airlock_set_template_program(argv[3], &e) < 0) { fprintf(stderr, "%s\n", e.message); return 1; }
        if (airlock_config_new(&cfg, &e) < 0 || airlock_cache_new(2, 0, &c, &e) < 0) return 1;
        if (argc > 4) {
                /* The C callback tool round trip, as the Python one is timed. */
                airlock_tool_def d = {.size = sizeof(airlock_tool_def), .name = "echo", .description = "e", .fn = echo_tool,
                        .parameters_json = "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}}}"};
                if (airlock_config_add_tool(cfg, &d, &e) < 0 ||
                    airlock_cache_run(c, cfg, argv[4], strlen(argv[4]), NULL, &r, &e) < 0) return 1;
                fputs(r->stdout_data ? r->stdout_data : "0\n", stdout);
                return 0;
        }
        double *lat = calloc((size_t)runs, sizeof(double));
        for (int i = -5; i < runs; i++) {
                usleep(gap);
                double t0 = now_ms();
                if (airlock_cache_run(c, cfg, "print(1)", 8, NULL, &r, &e) < 0 || !r->success) {
                        fprintf(stderr, "%s\n", e.message); return 1; }
                if (i >= 0) lat[i] = now_ms() - t0;
                airlock_result_free(r);
        }
        qsort(lat, (size_t)runs, sizeof(double), cmp);
        printf("%.4f\n", lat[runs / 2]);
        airlock_cache_close(c); airlock_config_free(cfg); return 0;
}
'''

GUEST_LOOP = '''
import time
lat = []
for i in range({n}):
    t0 = time.perf_counter_ns()
    call_tool("{tool}", x=i)
    lat.append(time.perf_counter_ns() - t0)
lat.sort()
print(lat[len(lat) // 2] / 1000)
'''


def echo(x: int) -> int:
    return x


async def aecho(x: int) -> int:
    return x


EXE = os.path.join(build, "bench_python_c")


def build_c():
    src = os.path.join(build, "bench_python_c.c")
    with open(src, "w") as f:
        f.write(C_SRC)
    libs = subprocess.run(["pkg-config", "--libs", "libseccomp", "jansson"],
                          capture_output=True, text=True, check=True).stdout.split()
    subprocess.run(["cc", "-O2", "-std=c11", "-D_GNU_SOURCE", f"-I{ROOT}/include", "-o", EXE, src,
                    os.path.join(build, "libairlock.a"), *libs, "-lpthread"], check=True)


def c_run(*extra, runs=RUNS):
    out = subprocess.run([EXE, str(runs), str(int(GAP_S * 1e6)),
                          airlock._airlock.TEMPLATE_PROGRAM, *extra],
                         capture_output=True, text=True, check=True).stdout
    return float(out)


def py_run_median(sb, runs=RUNS // 2):
    lat = []
    for i in range(-5, runs):
        time.sleep(GAP_S)
        t0 = time.perf_counter()
        r = sb.run("print(1)")
        if i >= 0:
            lat.append((time.perf_counter() - t0) * 1e3)
        assert r.success
    return statistics.median(lat)


def inproc_pair(sb, runs=RUNS):
    """Python's run and the C library's, called from this same process one
    after the other for each sample (the C one through ctypes on the very
    libairlock.so the extension uses, for the bench only: the package
    itself has no ctypes): the same template, the same process, the same
    moment of the machine's load."""
    import ctypes
    lib = ctypes.CDLL(os.path.join(build, "libairlock.so"))
    err = ctypes.create_string_buffer(8 + 1024 + 4096 + 64)
    cfg, cache, res = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    lib.airlock_cache_run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p,
                                      ctypes.c_size_t, ctypes.c_void_p,
                                      ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
    lib.airlock_result_free.argtypes = [ctypes.c_void_p]
    assert lib.airlock_config_new(ctypes.byref(cfg), err) == 0
    assert lib.airlock_cache_new(2, ctypes.c_double(0), ctypes.byref(cache), err) == 0
    code = b"print(1)"
    cl, pl, ccpu, pcpu = [], [], [], []
    for i in range(-5, runs):
        time.sleep(GAP_S)
        u0, t0 = time.thread_time(), time.perf_counter()
        r = lib.airlock_cache_run(cache, cfg, code, len(code), None, ctypes.byref(res), err)
        t1, u1 = time.perf_counter(), time.thread_time()
        assert r == 0 and ctypes.cast(res, ctypes.POINTER(ctypes.c_bool))[0]
        lib.airlock_result_free(res)
        time.sleep(GAP_S)
        u2, t2 = time.thread_time(), time.perf_counter()
        pr = sb.run("print(1)")
        t3, u3 = time.perf_counter(), time.thread_time()
        assert pr.success
        if i >= 0:
            cl.append((t1 - t0) * 1e3)
            pl.append((t3 - t2) * 1e3)
            ccpu.append((u1 - u0) * 1e3)
            pcpu.append((u3 - u2) * 1e3)
    lib.airlock_cache_close(cache)
    lib.airlock_config_free(cfg)
    # The calling thread's CPU time per run: what each side costs the host,
    # which the machine's load does not stretch as it does wall time.
    global cpu_pair
    cpu_pair = (statistics.median(pcpu), statistics.median(ccpu))
    return statistics.median(pl), statistics.median(cl)


cpu_pair = (0.0, 0.0)


def tools_main():
    """The sync Python tool and the C callback tool, alternating rounds of
    CALLS calls each so that both see the machine's load alike."""
    build_c()
    sb = airlock.Sandbox(tools=[echo], limits={"timeout": 120})
    py, c = [], []
    for _ in range(5):
        r = sb.run(GUEST_LOOP.format(n=CALLS, tool="echo"))
        assert r.success, r.stderr
        py.append(float(r.stdout))
        c.append(c_run(GUEST_LOOP.format(n=CALLS, tool="echo")))
    sb.close()
    load = os.getloadavg()[0]
    print(f"tool round trip, median of 5 rounds of {CALLS} calls (load average {load:.2f})")
    print(f"  sync Python tool  {statistics.median(py):8.2f} us   rounds {py}")
    print(f"  C callback tool   {statistics.median(c):8.2f} us   rounds {c}")
    print(json.dumps({"tool_sync_us": statistics.median(py), "tool_c_us": statistics.median(c),
                      "load": load, "calls": CALLS}))


def main():
    if tools_only:
        return tools_main()
    build_c()
    sb = airlock.Sandbox(tools=[echo, aecho], limits={"timeout": 120})
    r = sb.run(GUEST_LOOP.format(n=CALLS, tool="echo"))
    assert r.success, r.stderr
    sync_us = float(r.stdout)
    c_tool_us = c_run(GUEST_LOOP.format(n=CALLS, tool="echo"))

    async def arun():
        return await sb.arun(GUEST_LOOP.format(n=CALLS // 4, tool="aecho"))
    r = asyncio.run(arun())
    assert r.success, r.stderr
    async_us = float(r.stdout)
    sb.close()

    plain = airlock.Sandbox()
    # Interleaved rounds, C then Python, so that both see the machine's
    # load alike; the median of the rounds' medians.
    cs, ps = [], []
    for _ in range(2 if quick else 4):
        cs.append(c_run(runs=RUNS // 2))
        ps.append(py_run_median(plain))
    in_py, in_c = inproc_pair(plain)
    plain.close()
    c_ms, py_ms = statistics.median(cs), statistics.median(ps)
    res = {"tool_sync_us": round(sync_us, 2), "tool_c_us": round(c_tool_us, 2),
           "tool_async_us": round(async_us, 2),
           "run_py_ms": round(py_ms, 4), "run_c_ms": round(c_ms, 4),
           "ratio": round(py_ms / c_ms, 3), "inproc_py_ms": round(in_py, 4),
           "inproc_c_ms": round(in_c, 4), "inproc_ratio": round(in_py / in_c, 3),
           "host_cpu_py_ms": round(cpu_pair[0], 4), "host_cpu_c_ms": round(cpu_pair[1], 4),
           "load": os.getloadavg()[0],
           "calls": CALLS, "runs": RUNS}
    print("Python package (bench/bench_python.py)")
    print(f"  sync tool round trip   median {sync_us:8.2f} us   (target < 30)")
    print(f"  C callback tool (same)  median {c_tool_us:8.2f} us   (the library's own floor)")
    print(f"  async tool, caller loop median {async_us:8.2f} us")
    print(f"  run('print(1)') Python  median {py_ms:8.3f} ms")
    print(f"  run('print(1)') C       median {c_ms:8.3f} ms   ratio {py_ms / c_ms:.3f} (target <= 1.1)")
    print(f"  same process, alternating: Python {in_py:.3f} ms, C {in_c:.3f} ms, "
          f"ratio {in_py / in_c:.3f}")
    print(f"  host CPU of the calling thread per run: Python {cpu_pair[0]:.3f} ms, "
          f"C {cpu_pair[1]:.3f} ms (load average {os.getloadavg()[0]:.1f})")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
