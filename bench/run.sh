#!/usr/bin/env bash
# `make bench`: measures airlock against the alternatives on this machine, side
# by side in one run. Builds the library-level helpers, installs the npm peers
# (Pyodide, sandbox-runtime) into bench/node_modules, then bench/bench.py
# times every system and writes bench/results/latest.{md,json,svg}. Debian
# peers (bubblewrap, firejail, runsc, ...) come from scripts/deps.sh bench.
#
# usage: bench/run.sh BUILD_DIR [--quick]
set -euo pipefail

build=${1:-build}
quick=${2:-}
cd "$(dirname "$0")/.."

# A section that fails is named at once and again at the end, and makes the
# run fail once every other section has run: its figures are missing or
# wrong, and a line in the middle of the log went unread.
failures=()
section_failed() {
    echo "bench: $1 failed" >&2
    failures+=("$1")
}

# No libcurl: the library opens it when a run first makes an HTTP request.
# No libpython: the template loads it with the guest module.
libs="$(pkg-config --libs libseccomp jansson) -lpthread"
for prog in bench_sandbox bench_workloads bench_cache; do
    # shellcheck disable=SC2086 # $libs is a list of flags
    cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -o "$build/$prog" "bench/$prog.c" \
        "$build/libairlock.a" $libs
done
# The file transfer benchmark uses library internals (fsx.h); it is optional.
rm -f "$build/bench_fsx"
if [ -f bench/bench_fsx.c ]; then
    # shellcheck disable=SC2086
    cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc/common -Isrc/lib -o "$build/bench_fsx" bench/bench_fsx.c \
        "$build/libairlock.a" $libs ||
        echo "bench: bench/bench_fsx.c does not build; file transfer figures skipped" >&2
fi

# npm peers: installed once; a failure only means those peers are skipped.
if [ ! -d bench/node_modules/pyodide ] || [ ! -e bench/node_modules/.bin/srt ]; then
    echo "bench: installing npm peers (pyodide, @anthropic-ai/sandbox-runtime)" >&2
    (cd bench && timeout 300 npm install --no-audit --no-fund --no-package-lock \
        --loglevel=error >/dev/null 2>&1) ||
        echo "bench: npm install failed; Pyodide and srt will be listed as skipped" >&2
fi

# bench.py prints the table; `make bench QUICK=1` passes --quick.
/usr/bin/python3 bench/bench.py "$build" $quick || exit
# Sessions through airlock mcp against fresh runs and a notebook kernel.
rounds=300
[ -n "$quick" ] && rounds=100
PYDEVD_DISABLE_FILE_VALIDATION=1 /usr/bin/python3 bench/bench_session.py "$build" "$rounds" ||
    section_failed bench/bench_session.py
# A call after a one-file edit of a 10,000-file workspace against an
# unchanged call (issue 40: at most +20 ms), unheld and held by a session.
/usr/bin/python3 bench/bench_ws_edit.py "$build" $quick ||
    section_failed bench/bench_ws_edit.py
# A call on a shared tenants folder (GlusterFS over FUSE) against a local one
# (issue 42: at most +1 ms unchanged, +5 ms after a one-file change, for a
# 20-file tenant; the figures of a 10,000-file tenant). Needs root and FUSE.
/usr/bin/python3 bench/bench_shared.py "$build" $quick ||
    section_failed bench/bench_shared.py
# airlock kernel against Debian's ipykernel through jupyter_client.
krounds=200
[ -n "$quick" ] && krounds=50
PYDEVD_DISABLE_FILE_VALIDATION=1 /usr/bin/python3 bench/bench_kernel.py "$build" "$krounds" ||
    section_failed bench/bench_kernel.py
# What a secret adds to the gateway's own time (the rewrite functions and a
# loopback request with and without one).
runs=2000
[ -n "$quick" ] && runs=400
bash bench/bench_secrets.sh "$build" "$runs" || section_failed bench/bench_secrets.sh
# The Python package against the C library (make bench builds it first).
if ls python/airlock/_airlock*.so >/dev/null 2>&1; then
    /usr/bin/python3 bench/bench_python.py "$build" $quick || section_failed bench/bench_python.py
else
    echo "bench: the Python package is not built (make python); its figures skipped" >&2
fi
# airlock serve over HTTP against stdio, with and without HAProxy in front,
# and three instances behind HAProxy against one alone.
/usr/bin/python3 bench/bench_serve.py "$build" "$rounds" ||
    section_failed bench/bench_serve.py
# Peers: a session's call through a replica that forwards it to the owner
# against the same call to the owner (issue 42: at most +0.5 ms, median).
/usr/bin/python3 bench/bench_peers.py "$build" "$rounds" ||
    section_failed bench/bench_peers.py
/usr/bin/python3 bench/bench_tracing.py "$build" "$rounds" ||
    section_failed bench/bench_tracing.py
# Code mode: upstream MCP calls from the guest against the SDK client's own,
# the stubs' cost at sandbox build, and the context bytes of one task
# (needs the servers of tests/mcp: npm install there).
# shellcheck disable=SC2086 # $libs is a list of flags
cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc/common -Isrc/lib -o "$build/bench_stubs" \
    bench/bench_stubs.c "$build/libairlock.a" $libs &&
    "$build/bench_stubs" "$PWD/bench/mcp_many_tools.py" 100 21 ||
    section_failed bench/bench_stubs.c
if [ -d tests/mcp/node_modules/@modelcontextprotocol/server-everything ]; then
    node bench/bench_servers.mjs "$build" 10 || section_failed bench/bench_servers.mjs
else
    echo "bench: tests/mcp has no MCP servers (npm install there); code mode skipped" >&2
fi
if [ ${#failures[@]} -gt 0 ]; then
    echo "bench: ${#failures[@]} section(s) failed: ${failures[*]}" >&2
    exit 1
fi
