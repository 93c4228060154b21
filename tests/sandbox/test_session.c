/* Sessions against a real sandbox: state across runs, snapshots that can be
 * restored more than once, /output emptied between runs, and cells that
 * roll back when they fail, time out, are cancelled or hit the memory
 * limit, without losing the session. Also the single runs of
 * copies that populate their pages ahead (template.c), with and without a
 * kernel that supports it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "airlock.h"

static airlock_sandbox *sb;

static int setup(void **state)
{
        airlock_error err;
        airlock_config *cfg;
        if (airlock_config_new(&cfg, &err) < 0)
                return -1;
        airlock_limits lim;
        airlock_limits_default(&lim);
        lim.timeout_s = 2;
        airlock_config_set_limits(cfg, &lim, &err);
        int r = airlock_sandbox_new(cfg, &sb, &err);
        if (r < 0)
                print_error("sandbox: %s\n", err.message);
        airlock_config_free(cfg);
        return r < 0 ? -1 : 0;
}

static int teardown(void **state)
{
        airlock_sandbox_close(sb);
        return 0;
}

static airlock_result *run(airlock_session *s, const char *code)
{
        airlock_error err;
        airlock_result *res = NULL;
        int r = airlock_session_run(s, code, strlen(code), NULL, &res, &err);
        if (r < 0)
                print_error("run: %s\n", err.message);
        assert_int_equal(r, 0);
        return res;
}

static void expect_stdout(airlock_session *s, const char *code, const char *out)
{
        airlock_result *res = run(s, code);
        assert_true(res->success);
        if (out)
                assert_string_equal(res->stdout_data, out);
        airlock_result_free(res);
}

static void test_state_persists(void **state)
{
        airlock_error err;
        airlock_session *s;
        assert_int_equal(airlock_session_open(sb, &s, &err), 0);
        expect_stdout(s, "x = 41", "");
        expect_stdout(s, "x += 1\nprint(x)", "42\n");
        /* An exception fails the run but keeps the session. */
        airlock_result *res = run(s, "raise KeyError('k')");
        assert_false(res->success);
        assert_non_null(strstr(res->stderr_data, "KeyError"));
        airlock_result_free(res);
        expect_stdout(s, "print(x)", "42\n");
        airlock_session_close(s);
}

static void test_single_runs_stay_fresh(void **state)
{
        airlock_error err;
        airlock_session *s;
        assert_int_equal(airlock_session_open(sb, &s, &err), 0);
        expect_stdout(s, "y = 1", "");
        airlock_result *res;
        const char *code = "print('y' in globals())";
        assert_int_equal(airlock_sandbox_run(sb, code, strlen(code), NULL, &res, &err), 0);
        assert_string_equal(res->stdout_data, "False\n");
        airlock_result_free(res);
        airlock_session_close(s);
}

/* A run marked last prepares no copy; a run after it still works, on a
 * copy started on demand. */
static void test_run_after_a_last_run(void **state)
{
        airlock_error err;
        airlock_result *res;
        const airlock_run_options last = {
            .size = sizeof(airlock_run_options), .cancel_fd = -1, .last = true};
        const char *code = "print(7)";
        for (int i = 0; i < 2; i++) {
                assert_int_equal(
                    airlock_sandbox_run(sb, code, strlen(code), i == 0 ? &last : NULL, &res, &err),
                    0);
                assert_true(res->success);
                assert_string_equal(res->stdout_data, "7\n");
                airlock_result_free(res);
        }
}

/* What the template imports in its warm-up (csv, which nothing else
 * imports) shows whether the copy of a run was made after it: in a sandbox
 * of airlock_sandbox_new, the second copy is; in a one-shot sandbox only
 * the third, the warm-up coming after the second copy. Every run works. */
static void test_oneshot_sandbox_warms_up_late(void **state)
{
        airlock_error err;
        airlock_config *cfg;
        assert_int_equal(airlock_config_new(&cfg, &err), 0);
        const char *code = "import sys; print('csv' in sys.modules)";
        static const char *const want[2][3] = {{"False\n", "True\n", "True\n"},
                                               {"False\n", "False\n", "True\n"}};
        for (int oneshot = 0; oneshot < 2; oneshot++) {
                airlock_sandbox *one;
                int r = oneshot ? airlock_sandbox_new_oneshot(cfg, &one, &err)
                                : airlock_sandbox_new(cfg, &one, &err);
                if (r < 0)
                        fail_msg("sandbox: %s", err.message);
                for (int i = 0; i < 3; i++) {
                        airlock_result *res;
                        assert_int_equal(
                            airlock_sandbox_run(one, code, strlen(code), NULL, &res, &err), 0);
                        assert_true(res->success);
                        assert_string_equal(res->stdout_data, want[oneshot][i]);
                        airlock_result_free(res);
                }
                airlock_sandbox_close(one);
        }
        airlock_config_free(cfg);
}

/* A session's cells are not the end of a program: atexit handlers wait
 * for the session's end, while figures come back after every cell, as a
 * notebook shows them, each once. */
static void test_cells_return_figures_but_run_no_atexit(void **state)
{
        airlock_error err;
        airlock_session *s;
        /* Its own sandbox with the default limits: importing matplotlib
         * takes seconds on a busy machine, past the 2 s of the shared
         * sandbox, which is for the timeout test. */
        airlock_config *cfg;
        airlock_sandbox *own;
        assert_int_equal(airlock_config_new(&cfg, &err), 0);
        assert_int_equal(airlock_sandbox_new(cfg, &own, &err), 0);
        airlock_config_free(cfg);
        assert_int_equal(airlock_session_open(own, &s, &err), 0);
        airlock_result *res =
            run(s, "import atexit\n"
                   "atexit.register(lambda: open('/output/bye', 'w').write('x'))\n"
                   "f = open('/output/kept.txt', 'w')\nf.write('a')\nf.flush()\n");
        assert_true(res->success);
        assert_int_equal(res->n_files, 1);
        assert_string_equal(res->files[0].path, "/output/kept.txt");
        airlock_result_free(res);
        /* The file the first cell left open is still open. */
        expect_stdout(s, "print(f.closed)", "False\n");

        res = run(s, "import matplotlib.pyplot as plt\nplt.plot([1, 2])\n");
        if (!res->success)
                print_error("%s: %s\n", airlock_status_name(res->status), res->stderr_data);
        assert_true(res->success);
        assert_int_equal(res->n_files, 1);
        assert_string_equal(res->files[0].path, "/output/figure-1.png");
        assert_memory_equal(res->files[0].data, "\x89PNG", 4);
        airlock_result_free(res);
        res = run(s, "print(len(plt.get_fignums()))\n");
        assert_true(res->success);
        assert_string_equal(res->stdout_data, "0\n");
        assert_int_equal(res->n_files, 0);
        airlock_result_free(res);
        airlock_session_close(s);
        airlock_sandbox_close(own);
}

static void test_snapshot_restore_twice(void **state)
{
        airlock_error err;
        airlock_session *s;
        airlock_snapshot *snap;
        assert_int_equal(airlock_session_open(sb, &s, &err), 0);
        expect_stdout(s, "n = 1", "");
        assert_int_equal(airlock_session_snapshot(s, &snap, &err), 0);
        expect_stdout(
            s, "n = 100\nimport os\nif os.fork() == 0:\n    import time; time.sleep(60)\n", "");
        expect_stdout(s, "print(n)", "100\n");
        assert_int_equal(airlock_session_restore(s, snap, &err), 0);
        expect_stdout(s, "print(n); n += 1", "1\n");
        /* The old state's background process is gone: only pid 1 (the
         * session's root), the snapshot, the cell base and the active
         * interpreter remain. */
        expect_stdout(s, "import os\nprint(len([p for p in os.listdir('/proc') if p.isdigit()]))",
                      "4\n");
        assert_int_equal(airlock_session_restore(s, snap, &err), 0);
        expect_stdout(s, "print(n)", "1\n");
        /* Again after the second restore: the first restored state's
         * process is gone too, reaped rather than left as a zombie of the
         * snapshot it came from. */
        expect_stdout(s, "import os\nprint(len([p for p in os.listdir('/proc') if p.isdigit()]))",
                      "4\n");
        airlock_snapshot_free(snap);
        airlock_session_close(s);
}

/* The host processes whose name (comm) is name. */
static int count_named(const char *name)
{
        int n = 0;
        DIR *d = opendir("/proc");
        assert_non_null(d);
        struct dirent *de;
        while ((de = readdir(d))) {
                char path[300], comm[64];
                if (atoi(de->d_name) <= 0)
                        continue;
                snprintf(path, sizeof(path), "/proc/%s/comm", de->d_name);
                FILE *f = fopen(path, "re");
                if (!f)
                        continue;
                if (fgets(comm, sizeof(comm), f) && strncmp(comm, name, strlen(name)) == 0)
                        n++;
                fclose(f);
        }
        closedir(d);
        return n;
}

/* A session's close returns only once every process of the session is
 * gone: a background process it started no longer exists, not even as a
 * zombie, the moment close returns. */
static void test_close_returns_once_the_session_is_gone(void **state)
{
        airlock_error err;
        airlock_session *s;
        assert_int_equal(airlock_session_open(sb, &s, &err), 0);
        expect_stdout(s,
                      "import ctypes, os, time\n"
                      "r, w = os.pipe()\n"
                      "if os.fork() == 0:\n"
                      "    ctypes.CDLL(None).prctl(15, b'airlock-linger', 0, 0, 0)\n"
                      "    os.write(w, b'x')\n"
                      "    time.sleep(60)\n"
                      "    os._exit(0)\n"
                      "print(os.read(r, 1).decode(), end='')\n",
                      "x");
        assert_int_equal(count_named("airlock-linger"), 1);
        airlock_session_close(s);
        assert_int_equal(count_named("airlock-linger"), 0);
}

static void test_output_is_emptied_between_runs(void **state)
{
        airlock_error err;
        airlock_session *s;
        assert_int_equal(airlock_session_open(sb, &s, &err), 0);
        airlock_result *res = run(s, "open('/output/a.txt','w').write('A')");
        assert_int_equal(res->n_files, 1);
        assert_string_equal(res->files[0].path, "/output/a.txt");
        airlock_result_free(res);
        res = run(s, "import os; print(os.listdir('/output'))");
        assert_int_equal(res->n_files, 0);
        assert_string_equal(res->stdout_data, "[]\n");
        airlock_result_free(res);
        airlock_session_close(s);
}

/* The session's processes, counted from inside: pid 1, the cell base and
 * the active interpreter, and whatever the cells started. */
#define COUNT_PROCS "import os\nprint(len([p for p in os.listdir('/proc') if p.isdigit()]))"

/* A cell that fails rolls the state back: what it set is gone, what came
 * before is as it was, and the result says which happened. */
static void test_failed_cell_rolls_back(void **state)
{
        airlock_error err;
        airlock_session *s;
        assert_int_equal(airlock_session_open(sb, &s, &err), 0);
        airlock_result *res = run(s, "x = 1\nimport json\n");
        assert_int_equal(res->cell_state, AIRLOCK_CELL_KEPT);
        airlock_result_free(res);
        res = run(s, "x = 2\ny = 3\nimport decimal\nraise ValueError('no')");
        assert_false(res->success);
        assert_int_equal(res->cell_state, AIRLOCK_CELL_ROLLED_BACK);
        assert_non_null(strstr(res->stderr_data, "ValueError"));
        airlock_result_free(res);
        expect_stdout(s,
                      "import sys\nprint(x, 'y' in globals(), 'decimal' in sys.modules, "
                      "'json' in sys.modules)",
                      "1 False False True\n");
        /* A non-zero exit fails the cell too. */
        res = run(s, "x = 5\nimport sys; sys.exit(3)");
        assert_int_equal(res->exit_code, 3);
        assert_int_equal(res->cell_state, AIRLOCK_CELL_ROLLED_BACK);
        airlock_result_free(res);
        expect_stdout(s, "print(x)", "1\n");
        /* A rollback leaves nothing of the failed cell behind: pid 1, the
         * base and the interpreter. */
        res = run(s, "import os\nif os.fork() == 0:\n    import time; time.sleep(60)\n"
                     "raise KeyError(1)");
        assert_int_equal(res->cell_state, AIRLOCK_CELL_ROLLED_BACK);
        airlock_result_free(res);
        expect_stdout(s, COUNT_PROCS, "3\n");
        airlock_session_close(s);
}

/* A cell that times out is killed and rolled back; the session goes on
 * with the state from before the cell, and so does the sandbox. */
static void test_timeout_rolls_back(void **state)
{
        airlock_error err;
        airlock_session *s;
        assert_int_equal(airlock_session_open(sb, &s, &err), 0);
        expect_stdout(s, "x = 41", "");
        airlock_result *res = run(s, "x = 0\nprint('started', flush=True)\nwhile True: pass");
        assert_int_equal(res->status, AIRLOCK_STATUS_TIMEOUT);
        assert_int_equal(res->cell_state, AIRLOCK_CELL_ROLLED_BACK);
        assert_string_equal(res->stdout_data, "started\n");
        airlock_result_free(res);
        expect_stdout(s, "x += 1\nprint(x)", "42\n");
        /* Twice in a row: the base taken after the rollback serves again. */
        res = run(s, "x = 0\nwhile True: pass");
        assert_int_equal(res->cell_state, AIRLOCK_CELL_ROLLED_BACK);
        airlock_result_free(res);
        expect_stdout(s, "print(x)", "42\n");
        airlock_session_close(s);
        /* The sandbox still works. */
        assert_int_equal(airlock_sandbox_run(sb, "print(2)", 8, NULL, &res, &err), 0);
        assert_string_equal(res->stdout_data, "2\n");
        airlock_result_free(res);
}

static void test_cancel_rolls_back(void **state)
{
        airlock_error err;
        airlock_session *s;
        assert_int_equal(airlock_session_open(sb, &s, &err), 0);
        expect_stdout(s, "x = 'before'", "");
        int p[2];
        assert_int_equal(pipe(p), 0);
        /* Readable at once: the cell is cancelled as soon as it runs. */
        assert_int_equal(write(p[1], "c", 1), 1);
        airlock_run_options o = {
            .size = sizeof(airlock_run_options), .cancel_fd = p[0], .watch_fd = -1};
        const char *code = "x = 'during'\nimport time\ntime.sleep(30)";
        airlock_result *res = NULL;
        assert_int_equal(airlock_session_run(s, code, strlen(code), &o, &res, &err), 0);
        assert_int_equal(res->status, AIRLOCK_STATUS_KILLED);
        assert_int_equal(res->cell_state, AIRLOCK_CELL_ROLLED_BACK);
        airlock_result_free(res);
        close(p[0]);
        close(p[1]);
        expect_stdout(s, "print(x)", "before\n");
        airlock_session_close(s);
}

/* A sandbox of the test's own, with the default limits but memory. */
static airlock_sandbox *sandbox_with_memory(uint64_t bytes)
{
        airlock_error err;
        airlock_config *cfg;
        airlock_sandbox *own;
        assert_int_equal(airlock_config_new(&cfg, &err), 0);
        airlock_limits lim;
        airlock_limits_default(&lim);
        lim.memory_bytes = bytes;
        assert_int_equal(airlock_config_set_limits(cfg, &lim, &err), 0);
        assert_int_equal(airlock_sandbox_new(cfg, &own, &err), 0);
        airlock_config_free(cfg);
        return own;
}

/* A cell killed by the memory limit (the cgroup's OOM killer, or a
 * MemoryError) rolls back; the data the session held survives. */
static void test_memory_limit_rolls_back(void **state)
{
        airlock_error err;
        airlock_sandbox *own = sandbox_with_memory(256ull << 20);
        airlock_session *s;
        assert_int_equal(airlock_session_open(own, &s, &err), 0);
        expect_stdout(s, "data = bytearray(32 << 20)\ndata[0] = 7", "");
        airlock_result *res = run(s, "data[0] = 8\nhog = []\n"
                                     "while True: hog.append(bytearray(16 << 20))\n");
        assert_int_equal(res->status, AIRLOCK_STATUS_MEMORY);
        assert_int_equal(res->cell_state, AIRLOCK_CELL_ROLLED_BACK);
        airlock_result_free(res);
        expect_stdout(s, "print(len(data) >> 20, data[0], 'hog' in globals())", "32 7 False\n");
        airlock_session_close(s);
        airlock_sandbox_close(own);
}

/* A cell shows the value of its final expression as a notebook does (its
 * repr, capped; _repr_png_ as an image); a single run stays a script. */
static void test_final_expression_is_displayed(void **state)
{
        airlock_error err;
        airlock_session *s;
        assert_int_equal(airlock_session_open(sb, &s, &err), 0);
        expect_stdout(s, "x = 6\nx * 7", "42\n");
        expect_stdout(s, "print(_)\nNone", "42\n");
        expect_stdout(s, "x = 1  # no final expression", "");
        airlock_result *res = run(s, "'a' * 30000");
        assert_true(res->success);
        assert_int_equal(strncmp(res->stdout_data, "'aaa", 4), 0);
        assert_non_null(strstr(res->stdout_data, "more characters not shown"));
        assert_true(res->stdout_len < 20200);
        airlock_result_free(res);
        res = run(s, "class P:\n    def _repr_png_(self):\n        return b'\\x89PNG fake'\nP()");
        assert_true(res->success);
        assert_int_equal(res->n_files, 1);
        assert_string_equal(res->files[0].path, "/output/display-1.png");
        assert_string_equal(res->stdout_data, "");
        airlock_result_free(res);
        /* A failing final expression fails the cell, which rolls back. */
        res = run(s, "x = 2\n1 / 0");
        assert_int_equal(res->cell_state, AIRLOCK_CELL_ROLLED_BACK);
        assert_non_null(strstr(res->stderr_data, "ZeroDivisionError"));
        airlock_result_free(res);
        expect_stdout(s, "x", "1\n");
        airlock_session_close(s);
        assert_int_equal(airlock_sandbox_run(sb, "6 * 7", 5, NULL, &res, &err), 0);
        assert_string_equal(res->stdout_data, "");
        airlock_result_free(res);
}

static void test_snapshot_outlives_nothing(void **state)
{
        airlock_error err;
        airlock_session *s;
        airlock_snapshot *snap;
        assert_int_equal(airlock_session_open(sb, &s, &err), 0);
        assert_int_equal(airlock_session_snapshot(s, &snap, &err), 0);
        airlock_session_close(s);
        /* Freeing a snapshot after its session is closed is safe. */
        airlock_snapshot_free(snap);
}

/* From the third copy on, a copy starts by populating the pages a probe
 * copy was seen to touch (template.c). Those are private copies: nothing
 * one run writes may reach the next, and each copy still reseeds. */
static airlock_session *fork_of(airlock_session *s)
{
        airlock_error err;
        airlock_session *f = NULL;
        int r = airlock_session_fork(s, &f, &err);
        if (r < 0)
                print_error("fork: %s\n", err.message);
        assert_int_equal(r, 0);
        return f;
}

/* A fork has the parent's variables; from then on each side's writes are
 * its own, and a failed cell in the fork rolls back the fork only. */
static void test_fork_copies_state(void **state)
{
        airlock_session *s;
        airlock_error err;
        assert_int_equal(airlock_session_open(sb, &s, &err), 0);
        expect_stdout(s, "x = 41\nl = [1]", "");
        airlock_session *f = fork_of(s);
        expect_stdout(f, "x += 1\nl.append(2)\nprint(x, l)", "42 [1, 2]\n");
        expect_stdout(s, "print(x, l)", "41 [1]\n");
        expect_stdout(s, "y = 'parent'", "");
        airlock_result *res = run(f, "l.append(3)\nraise ValueError('v')");
        assert_false(res->success);
        assert_int_equal(res->cell_state, AIRLOCK_CELL_ROLLED_BACK);
        airlock_result_free(res);
        expect_stdout(f, "print(x, l, 'y' in globals())", "42 [1, 2] False\n");
        expect_stdout(s, "print(x, l, y)", "41 [1] parent\n");
        /* A timeout in the parent rolls the parent back, not the fork. */
        res = run(s, "x = 0\nimport time\ntime.sleep(30)");
        assert_int_equal(res->status, AIRLOCK_STATUS_TIMEOUT);
        assert_int_equal(res->cell_state, AIRLOCK_CELL_ROLLED_BACK);
        airlock_result_free(res);
        expect_stdout(s, "print(x)", "41\n");
        expect_stdout(f, "print(x)", "42\n");
        airlock_session_close(f);
        airlock_session_close(s);
}

/* A rollback in one handle ends the processes of that handle's cells only:
 * the parent's child process outlives the fork's failed cell. Closing the
 * fork ends the processes its cells started and not the parent's. */
static void test_fork_rollback_spares_siblings(void **state)
{
        airlock_session *s;
        airlock_error err;
        assert_int_equal(airlock_session_open(sb, &s, &err), 0);
        expect_stdout(s,
                      "import subprocess, os\n"
                      "p = subprocess.Popen(['sleep', '600'])\n"
                      "def alive(pid):\n"
                      "    try:\n"
                      "        os.kill(pid, 0)\n"
                      "    except ProcessLookupError:\n"
                      "        return False\n"
                      "    st = open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[0]\n"
                      "    return st != 'Z'\n"
                      "print(alive(p.pid))",
                      "True\n");
        /* The processes of the copy before the fork, and after it is
         * closed: the same, every process of the fork reaped. */
        const char *count = "print(alive(p.pid), len([d for d in os.listdir('/proc') "
                            "if d.isdigit()]))";
        airlock_result *before = run(s, count);
        airlock_session *f = fork_of(s);
        expect_stdout(f, "q = subprocess.Popen(['sleep', '600'])\nprint(alive(q.pid))", "True\n");
        airlock_result *res = run(f, "raise SystemExit(3)");
        assert_int_equal(res->cell_state, AIRLOCK_CELL_ROLLED_BACK);
        airlock_result_free(res);
        /* The fork's rollback ended the fork's own child, which its
         * rolled-back state still names, and not the parent's. */
        expect_stdout(f, "print(alive(p.pid), alive(q.pid))", "True False\n");
        expect_stdout(s, "print(alive(p.pid))", "True\n");
        expect_stdout(f, "r = subprocess.Popen(['sleep', '600'])\nprint(r.pid)", NULL);
        airlock_session_close(f);
        airlock_result *after = run(s, count);
        if (strcmp(after->stdout_data, before->stdout_data) != 0)
                print_error("before %s after %s\n", before->stdout_data, after->stdout_data);
        assert_string_equal(after->stdout_data, before->stdout_data);
        airlock_result_free(after);
        airlock_result_free(before);
        airlock_session_close(s);
}

/* Closing the parent leaves the fork running, and a fork can be forked;
 * closing the last handle ends the copy. */
static void test_fork_outlives_parent(void **state)
{
        airlock_session *s;
        airlock_error err;
        assert_int_equal(airlock_session_open(sb, &s, &err), 0);
        expect_stdout(s, "x = 7", "");
        airlock_session *f = fork_of(s);
        airlock_session_close(s);
        expect_stdout(f, "x += 1\nprint(x)", "8\n");
        airlock_session *g = fork_of(f);
        airlock_session_close(f);
        expect_stdout(g, "print(x)", "8\n");
        uint64_t held = 0;
        assert_int_equal(airlock_session_memory(g, &held, &err), 0);
        assert_true(held > 0);
        airlock_session_close(g);
}

/* Forks share /tmp (files are not state that a fork copies) and the
 * copy's /output, which each cell sees empty. */
static void test_fork_shares_tmp(void **state)
{
        airlock_session *s;
        airlock_error err;
        assert_int_equal(airlock_session_open(sb, &s, &err), 0);
        expect_stdout(s, "_ = open('/tmp/a', 'w').write('from parent')", "");
        airlock_session *f = fork_of(s);
        expect_stdout(f, "print(open('/tmp/a').read())\n_ = open('/tmp/b', 'w').write('fork')",
                      "from parent\n");
        expect_stdout(s, "print(open('/tmp/b').read())", "fork\n");
        airlock_result *res = run(f, "_ = open('/output/f.txt', 'w').write('1')");
        assert_int_equal(res->n_files, 1);
        airlock_result_free(res);
        res = run(s, "import os\nprint(os.listdir('/output'))");
        assert_string_equal(res->stdout_data, "[]\n");
        assert_int_equal(res->n_files, 0);
        airlock_result_free(res);
        airlock_session_close(s);
        airlock_session_close(f);
}

/* A session that has ended cannot be forked: -ESRCH, as for a cell. */
static void test_fork_of_ended_session(void **state)
{
        airlock_session *s;
        airlock_error err;
        assert_int_equal(airlock_session_open(sb, &s, &err), 0);
        /* The cell kills every other process of the session (its cell base
         * included) and fails: the rollback cannot happen. */
        airlock_result *res = run(s, "import os\n"
                                     "for d in os.listdir('/proc'):\n"
                                     "    if d.isdigit() and int(d) not in (1, os.getpid()):\n"
                                     "        try: os.kill(int(d), 9)\n"
                                     "        except OSError: pass\n"
                                     "raise SystemExit(1)");
        assert_int_equal(res->cell_state, AIRLOCK_CELL_NONE);
        airlock_result_free(res);
        assert_false(airlock_session_alive(s));
        airlock_session *f = NULL;
        assert_int_equal(airlock_session_fork(s, &f, &err), -ESRCH);
        assert_null(f);
        assert_non_null(strstr(err.message, "ended"));
        airlock_session_close(s);
}

/* Many forks of one session at once, each with the state and a cell of
 * its own, then all closed. */
static void test_many_forks(void **state)
{
        enum { N = 16 };
        airlock_session *s;
        airlock_error err;
        assert_int_equal(airlock_session_open(sb, &s, &err), 0);
        expect_stdout(s, "base = 100", "");
        airlock_session *f[N];
        for (int i = 0; i < N; i++)
                f[i] = fork_of(i % 2 ? f[i - 1] : s);
        for (int i = 0; i < N; i++) {
                char code[64], out[32];
                snprintf(code, sizeof(code), "base += %d\nprint(base)", i);
                snprintf(out, sizeof(out), "%d\n", 100 + i);
                expect_stdout(f[i], code, out);
        }
        expect_stdout(s, "print(base)", "100\n");
        for (int i = 0; i < N; i++)
                airlock_session_close(f[i]);
        expect_stdout(s,
                      "import os\nprint(len([d for d in os.listdir('/proc') if d.isdigit()]) < 8)",
                      "True\n");
        airlock_session_close(s);
}

/* Guest code that lists the processes of the copy other than pid 1 and
 * itself, with each one's parent: "pid:ppid" joined by spaces. */
#define OTHERS_CODE                                                                                \
        "import os\n"                                                                              \
        "def others():\n"                                                                          \
        "    out = []\n"                                                                           \
        "    for d in sorted(os.listdir('/proc'), key=lambda d: int(d) if d.isdigit() else 0):\n"  \
        "        if d.isdigit() and int(d) not in (1, os.getpid()):\n"                             \
        "            try: st = open(f'/proc/{d}/stat').read().rsplit(')', 1)[1].split()\n"         \
        "            except OSError: continue\n"                                                   \
        "            out.append(f'{d}:{st[1]}')\n"                                                 \
        "    return ' '.join(out)\n"

/* The fork is made from the handle's cell base, which holds the state as
 * the last cell left it: that process becomes the fork (a child of pid 1,
 * never of the parent), and the parent takes a new base. So the base's pid
 * is gone from the copy after the fork, and the fork has the state. */
static void test_fork_takes_the_cell_base(void **state)
{
        airlock_session *s;
        airlock_error err;
        assert_int_equal(airlock_session_open(sb, &s, &err), 0);
        expect_stdout(s, OTHERS_CODE "x = 5", "");
        /* The only other process is the cell base, the active process's
         * child. */
        airlock_result *res = run(s, "me = os.getpid()\nb = others()\nprint(b)");
        assert_true(res->success);
        int base = 0, parent = 0;
        assert_int_equal(sscanf(res->stdout_data, "%d:%d", &base, &parent), 2);
        assert_null(strchr(res->stdout_data, ' '));
        airlock_result_free(res);
        airlock_session *f = fork_of(s);
        char code[128], out[64];
        snprintf(code, sizeof(code), "print(x, os.getppid(), os.path.exists('/proc/%d'))", base);
        expect_stdout(f, code, "5 1 False\n");
        expect_stdout(s, code, "5 1 False\n");
        /* Of the parent's children, only its new base is left, and it is
         * no zombie: the fork's processes are pid 1's children, and the
         * base that became the fork was reaped. (The fork's own base, which
         * its kept cell replaces meanwhile, is pid 1's or the fork's.) */
        res = run(
            s, "kids = [p.split(':')[0] for p in others().split() if p.split(':')[1] == "
               "str(me)]\n"
               "print(len(kids), all(open(f'/proc/{k}/stat').read().rsplit(')', 1)[1].split()[0] "
               "!= 'Z' for k in kids))");
        snprintf(out, sizeof(out), "1 True\n");
        assert_string_equal(res->stdout_data, out);
        airlock_result_free(res);
        airlock_session_close(f);
        airlock_session_close(s);
}

/* Forks without a cell base to take (right after a restore, which ends the
 * base; right after another fork, whose new base is still pending) still
 * copy the state; and a base that a rollback kept serves a fork too, from
 * the new active process the rollback made. */
static void test_fork_with_and_without_a_base(void **state)
{
        airlock_session *s;
        airlock_error err;
        assert_int_equal(airlock_session_open(sb, &s, &err), 0);
        expect_stdout(s, "x = 1", "");
        airlock_snapshot *snap;
        assert_int_equal(airlock_session_snapshot(s, &snap, &err), 0);
        expect_stdout(s, "x = 2", "");
        assert_int_equal(airlock_session_restore(s, snap, &err), 0);
        airlock_session *a = fork_of(s);
        airlock_session *b = fork_of(s);
        airlock_session *c = fork_of(a);
        expect_stdout(a, "print(x)", "1\n");
        expect_stdout(b, "print(x)", "1\n");
        expect_stdout(c, "print(x)", "1\n");
        /* A failed cell rolls a back; its base stays and becomes the next
         * fork, which has a's state from before the failed cell. */
        expect_stdout(a, "x = 10", "");
        airlock_result *res = run(a, "x = 11\nraise ValueError");
        assert_int_equal(res->cell_state, AIRLOCK_CELL_ROLLED_BACK);
        airlock_result_free(res);
        airlock_session *d = fork_of(a);
        expect_stdout(d, "x += 1\nprint(x)", "11\n");
        expect_stdout(a, "print(x)", "10\n");
        res = run(d, "x = 99\nraise ValueError");
        assert_int_equal(res->cell_state, AIRLOCK_CELL_ROLLED_BACK);
        airlock_result_free(res);
        airlock_session *e = fork_of(d);
        expect_stdout(e, "print(x)", "11\n");
        airlock_session *all[] = {e, d, c, b, a};
        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
                airlock_session_close(all[i]);
        expect_stdout(s, "print(x)", "1\n");
        airlock_snapshot_free(snap);
        airlock_session_close(s);
}

/* Guest code that replaces every socket it holds past its channel (the
 * link to its cell base among them) with /dev/null, during a cell: the
 * numbers it reused stay its own (the old link is forgotten, not closed,
 * when the kept cell's new base replaces it), and the new base has a link
 * of its own, which the fork then takes over. Python code cannot reach the
 * link between cells (the interpreter's lock is held there); native code
 * that does meets the same check, and the fork then clones instead. */
static void test_fork_after_the_guest_replaced_its_fds(void **state)
{
        airlock_session *s;
        airlock_error err;
        assert_int_equal(airlock_session_open(sb, &s, &err), 0);
        expect_stdout(s,
                      OTHERS_CODE
                      "import stat\n"
                      "n = os.open('/dev/null', os.O_RDONLY)\n"
                      "taken = []\n"
                      "for fd in range(4, 64):\n"
                      "    try: st = os.fstat(fd)\n"
                      "    except OSError: continue\n"
                      "    if stat.S_ISSOCK(st.st_mode): os.dup2(n, fd); taken.append(fd)\n"
                      "print(len(taken))",
                      "1\n");
        airlock_result *res = run(s, "x = 3\nprint(others())");
        int base = 0, parent = 0;
        assert_int_equal(sscanf(res->stdout_data, "%d:%d", &base, &parent), 2);
        airlock_result_free(res);
        airlock_session *f = fork_of(s);
        char code[160];
        snprintf(code, sizeof(code),
                 "print(x, os.path.exists('/proc/%d'), "
                 "all(stat.S_ISCHR(os.fstat(fd).st_mode) for fd in taken))",
                 base);
        expect_stdout(f, code, "3 False True\n");
        expect_stdout(s, code, "3 False True\n");
        airlock_session_close(f);
        airlock_session_close(s);
}

/* Guest code that starts a child process of its own (Python threads do not
 * run between cells, a child process does) which sends sig, every
 * millisecond, to every other child of the session's process: its cell
 * bases. */
#define PESTER_CODE(sig)                                                                           \
        OTHERS_CODE "import signal, time\n"                                                        \
                    "me = os.getpid()\n"                                                           \
                    "pester = os.fork()\n"                                                         \
                    "if pester == 0:\n"                                                            \
                    "    while True:\n"                                                            \
                    "        for p in others().split():\n"                                         \
                    "            pid, ppid = map(int, p.split(':'))\n"                             \
                    "            if ppid == me and pid != os.getpid():\n"                          \
                    "                try: os.kill(pid, signal." sig ")\n"                          \
                    "                except OSError: pass\n"                                       \
                    "        time.sleep(0.001)\n"                                                  \
                    "x = 8\n"

#define PESTER_STOP                                                                                \
        "os.kill(pester, 9)\n"                                                                     \
        "os.waitpid(pester, 0)\n"                                                                  \
        "for p in others().split():\n"                                                             \
        "    pid, ppid = map(int, p.split(':'))\n"                                                 \
        "    if ppid == me: os.kill(pid, signal.SIGCONT)\n"                                        \
        "print(x)"

/* Stray SIGUSR2 at the cell base wake it, and it ignores them: only a
 * hand-over with the fork's fds makes it a fork. */
static void test_fork_ignores_stray_signals(void **state)
{
        airlock_session *s;
        airlock_error err;
        assert_int_equal(airlock_session_open(sb, &s, &err), 0);
        expect_stdout(s, PESTER_CODE("SIGUSR2"), "");
        for (int i = 0; i < 5; i++) {
                usleep(20 * 1000);
                airlock_session *f = fork_of(s);
                expect_stdout(f, "print(x)", "8\n");
                airlock_session_close(f);
        }
        expect_stdout(s, PESTER_STOP, "8\n");
        airlock_session_close(s);
}

/* A cell base that guest code killed or stopped: the fork either clones
 * the interpreter instead (a base already dead) or fails with a clear error
 * (a base that could not take the hand-over, after a bounded wait for a
 * stopped one), and the session goes on; its next cell gets a new base, so
 * a failed cell still rolls back. */
static void test_fork_when_the_guest_ends_its_base(void **state)
{
        for (int k = 0; k < 2; k++) {
                airlock_session *s;
                airlock_error err;
                assert_int_equal(airlock_session_open(sb, &s, &err), 0);
                expect_stdout(s, k ? PESTER_CODE("SIGSTOP") : PESTER_CODE("SIGKILL"), "");
                usleep(200 * 1000);
                airlock_session *f = NULL;
                int r = airlock_session_fork(s, &f, &err);
                if (getenv("SHOWFORK"))
                        print_message("fork with a pester (%d): %d %s\n", k, r,
                                      r ? err.message : "");
                /* Either outcome is right, by when the pester acted: a base
                 * killed before the hand-over is a clone, one killed or
                 * stopped in the hand-over a refusal. */
                if (r == 0) {
                        expect_stdout(f, "print(x)", "8\n");
                        airlock_session_close(f);
                } else {
                        assert_int_equal(r, -EAGAIN);
                        assert_non_null(strstr(err.message, "could not fork"));
                        assert_non_null(strstr(err.message, "the cell base could not become"));
                }
                assert_true(airlock_session_alive(s));
                expect_stdout(s, PESTER_STOP, "8\n");
                airlock_result *res = run(s, "x = 9\nraise ValueError");
                assert_int_equal(res->cell_state, AIRLOCK_CELL_ROLLED_BACK);
                airlock_result_free(res);
                f = fork_of(s);
                expect_stdout(f, "print(x)", "8\n");
                airlock_session_close(f);
                airlock_session_close(s);
        }
}

/* Guest code that fills the queue of the link to its cell base with junk
 * (its base's receiving end: up to the socket's limit, without blocking),
 * then fails, so that the rollback makes the next active process from that
 * base, with that link. A fork then must not wait on the full link: it
 * answers within the base's bounded wait and the session goes on. */
#define JUNK_LINK_CODE                                                                             \
        "import socket, stat\n"                                                                    \
        "n = 0\n"                                                                                  \
        "for fd in range(4, 64):\n"                                                                \
        "    try: st = os.fstat(fd)\n"                                                             \
        "    except OSError: continue\n"                                                           \
        "    if not stat.S_ISSOCK(st.st_mode): continue\n"                                         \
        "    k = socket.socket(fileno=os.dup(fd))\n"                                               \
        "    if k.type == socket.SOCK_SEQPACKET:\n"                                                \
        "        try:\n"                                                                           \
        "            while n < cap: k.send(b'j', socket.MSG_DONTWAIT); n += 1\n"                   \
        "        except OSError: pass\n"                                                           \
        "    k.close()\n"                                                                          \
        "open('/tmp/junk_n', 'w').write(str(n))\n"                                                 \
        "raise ValueError\n"

static void test_fork_when_the_guest_fills_its_link(void **state)
{
        /* A full queue (a send would block), then a few frames of junk. */
        const char *caps[] = {"cap = 1 << 20", "cap = 3"};
        for (size_t i = 0; i < 2; i++) {
                airlock_session *s;
                airlock_error err;
                assert_int_equal(airlock_session_open(sb, &s, &err), 0);
                char setup[64];
                snprintf(setup, sizeof(setup), "import os\nx = 4\n%s", caps[i]);
                expect_stdout(s, setup, "");
                airlock_result *res = run(s, JUNK_LINK_CODE);
                assert_int_equal(res->cell_state, AIRLOCK_CELL_ROLLED_BACK);
                airlock_result_free(res);
                /* Before the link stopped blocking, the full queue held the
                 * fork until the host gave up on the session (-ETIMEDOUT,
                 * the session ended), and the junk kept the base from the
                 * hand-over (-EAGAIN after its 10 s wait). */
                airlock_session *f = NULL;
                int r = airlock_session_fork(s, &f, &err);
                if (r < 0)
                        print_message("fork after a junked link (%s): %d %s\n", caps[i], r,
                                      err.message);
                assert_int_equal(r, 0);
                expect_stdout(f, "print(x)", "4\n");
                airlock_session_close(f);
                assert_true(airlock_session_alive(s));
                /* The junk was sent (read after the fork: a kept cell
                 * gives the session a new base and link). */
                expect_stdout(s, "print(x, int(open('/tmp/junk_n').read()) > 0)", "4 True\n");
                airlock_session_close(s);
        }
}

/* A file opened before the fork is one open file for both: its offset is
 * shared (the kernel's, not the interpreter's). */
static void test_fork_shares_file_offsets(void **state)
{
        airlock_session *s;
        airlock_error err;
        assert_int_equal(airlock_session_open(sb, &s, &err), 0);
        expect_stdout(s,
                      "import os\n_ = open('/tmp/o', 'w').write('abcdef')\n"
                      "fd = os.open('/tmp/o', os.O_RDONLY)\nprint(os.read(fd, 1))",
                      "b'a'\n");
        airlock_session *f = fork_of(s);
        expect_stdout(f, "print(os.read(fd, 2))", "b'bc'\n");
        expect_stdout(s, "print(os.read(fd, 1))", "b'd'\n");
        airlock_session_close(f);
        airlock_session_close(s);
}

/* A fork runs in its original's copy, under the copy's one memory limit:
 * what the original holds counts against the fork's cells (where the
 * copy has a cgroup of its own, which airlock_session_memory then reads
 * for both handles alike). */
static void test_fork_shares_the_memory_limit(void **state)
{
        airlock_error err;
        airlock_sandbox *own = sandbox_with_memory(256ull << 20);
        const char *fill = "more = bytearray(170 << 20)\n"
                           "for i in range(0, len(more), 4096): more[i] = 1\n"
                           "print(len(more) >> 20)";
        airlock_session *s, *fresh;
        assert_int_equal(airlock_session_open(own, &s, &err), 0);
        expect_stdout(s,
                      "data = bytearray(100 << 20)\n"
                      "for i in range(0, len(data), 4096): data[i] = 1",
                      "");
        airlock_session *f = fork_of(s);
        uint64_t ms = 0, mf = 0;
        assert_int_equal(airlock_session_memory(s, &ms, &err), 0);
        assert_int_equal(airlock_session_memory(f, &mf, &err), 0);
        if (ms == mf) {
                /* One cgroup for the copy: 100 MiB held by the original
                 * and 170 more in the fork pass the limit of 256. */
                assert_true(ms >= 100ull << 20);
                airlock_result *res = run(f, fill);
                assert_int_equal(res->status, AIRLOCK_STATUS_MEMORY);
                assert_int_equal(res->cell_state, AIRLOCK_CELL_ROLLED_BACK);
                airlock_result_free(res);
        } else {
                print_message("no cgroup per copy: the memory limit is per process\n");
        }
        expect_stdout(f, "print(len(data) >> 20, 'more' in globals())", "100 False\n");
        /* A session of its own, in a copy of its own, has room for it. */
        assert_int_equal(airlock_session_open(own, &fresh, &err), 0);
        expect_stdout(fresh, fill, "170\n");
        airlock_session_close(fresh);
        airlock_session_close(f);
        airlock_session_close(s);
        airlock_sandbox_close(own);
}

/* With a writable /input, the fork shares the copy's overlay: a change
 * made by either is seen by the other, and listed in both results. */
static void test_fork_shares_the_input_overlay(void **state)
{
        char dir[] = "/tmp/airlock-fork-ws-XXXXXX";
        assert_non_null(mkdtemp(dir));
        char path[sizeof(dir) + 16];
        snprintf(path, sizeof(path), "%s/a.txt", dir);
        FILE *fp = fopen(path, "w");
        assert_non_null(fp);
        fputs("one", fp);
        fclose(fp);
        airlock_error err;
        airlock_config *cfg;
        airlock_sandbox *own;
        assert_int_equal(airlock_config_new(&cfg, &err), 0);
        assert_int_equal(airlock_config_set_workspace(cfg, dir, &err), 0);
        airlock_config_set_input_writable(cfg, true);
        assert_int_equal(airlock_sandbox_new(cfg, &own, &err), 0);
        airlock_config_free(cfg);
        airlock_session *s;
        assert_int_equal(airlock_session_open(own, &s, &err), 0);
        expect_stdout(s, "print(open('/input/a.txt').read())", "one\n");
        airlock_session *f = fork_of(s);
        airlock_result *res = run(f, "_ = open('/input/a.txt', 'w').write('two')");
        assert_true(res->success);
        assert_int_equal(res->n_input_changes, 1);
        airlock_result_free(res);
        res = run(s, "print(open('/input/a.txt').read())");
        assert_string_equal(res->stdout_data, "two\n");
        assert_int_equal(res->n_input_changes, 1);
        airlock_result_free(res);
        airlock_session_close(f);
        airlock_session_close(s);
        airlock_sandbox_close(own);
        unlink(path);
        rmdir(dir);
}

static void test_prefaulted_copies_stay_fresh(void **state)
{
        const char *code = "import builtins, random\n"
                           "print(hasattr(builtins, 'planted'), random.getrandbits(64))\n"
                           "builtins.planted = True\n"
                           "random.seed(1)\n";
        char seen[8][64];
        for (int i = 0; i < 8; i++) {
                airlock_error err;
                airlock_result *res;
                /* Spaced like an agent's calls, so that each run takes a
                 * copy made after the probe rather than one on demand. */
                usleep(30000);
                assert_int_equal(airlock_sandbox_run(sb, code, strlen(code), NULL, &res, &err), 0);
                assert_true(res->success);
                assert_int_equal(strncmp(res->stdout_data, "False ", 6), 0);
                snprintf(seen[i], sizeof(seen[i]), "%s", res->stdout_data);
                airlock_result_free(res);
                for (int j = 0; j < i; j++)
                        assert_string_not_equal(seen[i], seen[j]);
        }
}

/* The population advices came with Linux 5.14; on an older kernel madvise
 * refuses them with EINVAL, and copies must prepare and run as before. The
 * filter is installed in a child, which the template and copies inherit. */
static void test_copies_without_populate_advice(void **state)
{
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
                if (!ctx ||
                    seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EINVAL), SCMP_SYS(madvise), 1,
                                     SCMP_A2(SCMP_CMP_EQ, 22 /* MADV_POPULATE_READ */)) < 0 ||
                    seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EINVAL), SCMP_SYS(madvise), 1,
                                     SCMP_A2(SCMP_CMP_EQ, 23 /* MADV_POPULATE_WRITE */)) < 0 ||
                    seccomp_load(ctx) < 0)
                        _exit(2);
                seccomp_release(ctx);
                airlock_error err;
                airlock_config *cfg;
                airlock_sandbox *old;
                if (airlock_config_new(&cfg, &err) < 0 || airlock_sandbox_new(cfg, &old, &err) < 0)
                        _exit(3);
                for (int i = 0; i < 5; i++) {
                        airlock_result *res;
                        const char *code = "print(6 * 7)";
                        usleep(30000);
                        if (airlock_sandbox_run(old, code, strlen(code), NULL, &res, &err) < 0 ||
                            !res->success || strcmp(res->stdout_data, "42\n") != 0)
                                _exit(4);
                        airlock_result_free(res);
                }
                airlock_sandbox_close(old);
                airlock_config_free(cfg);
                _exit(0);
        }
        int status = 0;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_state_persists),
            cmocka_unit_test(test_single_runs_stay_fresh),
            cmocka_unit_test(test_run_after_a_last_run),
            cmocka_unit_test(test_oneshot_sandbox_warms_up_late),
            cmocka_unit_test(test_cells_return_figures_but_run_no_atexit),
            cmocka_unit_test(test_snapshot_restore_twice),
            cmocka_unit_test(test_output_is_emptied_between_runs),
            cmocka_unit_test(test_failed_cell_rolls_back),
            cmocka_unit_test(test_final_expression_is_displayed),
            cmocka_unit_test(test_timeout_rolls_back),
            cmocka_unit_test(test_cancel_rolls_back),
            cmocka_unit_test(test_memory_limit_rolls_back),
            cmocka_unit_test(test_snapshot_outlives_nothing),
            cmocka_unit_test(test_close_returns_once_the_session_is_gone),
            cmocka_unit_test(test_fork_copies_state),
            cmocka_unit_test(test_fork_rollback_spares_siblings),
            cmocka_unit_test(test_fork_outlives_parent),
            cmocka_unit_test(test_fork_shares_tmp),
            cmocka_unit_test(test_fork_of_ended_session),
            cmocka_unit_test(test_many_forks),
            cmocka_unit_test(test_fork_takes_the_cell_base),
            cmocka_unit_test(test_fork_with_and_without_a_base),
            cmocka_unit_test(test_fork_after_the_guest_replaced_its_fds),
            cmocka_unit_test(test_fork_ignores_stray_signals),
            cmocka_unit_test(test_fork_when_the_guest_ends_its_base),
            cmocka_unit_test(test_fork_when_the_guest_fills_its_link),
            cmocka_unit_test(test_fork_shares_file_offsets),
            cmocka_unit_test(test_fork_shares_the_memory_limit),
            cmocka_unit_test(test_fork_shares_the_input_overlay),
            cmocka_unit_test(test_prefaulted_copies_stay_fresh),
            cmocka_unit_test(test_copies_without_populate_advice),
        };
        if (getenv("TEST_FILTER"))
                cmocka_set_test_filter(getenv("TEST_FILTER"));
        return cmocka_run_group_tests(tests, setup, teardown);
}
