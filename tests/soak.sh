#!/usr/bin/env bash
# The soak (`make soak`, not part of `make check`): SOAK_RUNS (default 10000)
# mixed runs through the library's cache (build/asan/tests/soak), then
# SOAK_MCP_RUNS (default SOAK_RUNS / 10) execute_code calls through one
# `airlock mcp` process (tests/helpers/soak_mcp.py), both built with
# ASan/UBSan. Fails on any sanitizer report, any wrong result, growth of the
# host's resident memory beyond 1 MiB or of its descriptors after the warm-up
# runs, and any process, staging folder, cgroup or mount left behind; then
# SOAK_SESSIONS (default 1000) MCP sessions opened and closed
# (tests/helpers/soak_sessions.py).
#
# ASan's quarantine keeps freed memory out of use on purpose (256 MiB by
# default) and would read as growth; it is made small here so resident
# memory measures what the code keeps. LeakSanitizer runs at the exit of the
# soak program and of the MCP server.
# Usage: tests/soak.sh [BUILD_DIR]   (default build/asan)
# Quick try: SOAK_RUNS=300 SOAK_MCP_RUNS=100 make soak
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/asan}
runs=${SOAK_RUNS:-10000}
mcp_runs=${SOAK_MCP_RUNS:-$((runs / 10))}
warmup=${SOAK_WARMUP:-500}
export SOAK_RUNS=$runs SOAK_WARMUP=$warmup
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:quarantine_size_mb=1:thread_local_quarantine_size_kb=64:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

for f in "$build/tests/soak" "$build/airlock"; do
    if [ ! -x "$f" ]; then
        echo "soak: $f is missing: run make soak (or make SAN=asan tests)" >&2
        exit 2
    fi
done

# Staging and the soak's own folders go here: anything left is a leak.
work=$(mktemp -d /tmp/airlock-soak-XXXXXX)
export TMPDIR=$work
log=$work.log
status=0

template_count() { # sandbox processes on the whole machine (informative only)
    pgrep -cf '^airlock-template$' || true
}

echo "soak: $runs library runs, then $mcp_runs MCP calls, with $build (log $log)"
echo "soak: ASAN_OPTIONS=$ASAN_OPTIONS"
before_templates=$(template_count)

"$build/tests/soak" 2>&1 | tee "$log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

/usr/bin/python3 tests/helpers/soak_mcp.py "$build/airlock" "$mcp_runs" "$warmup" 2>&1 | tee -a "$log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

# SOAK_SESSIONS (default 1000) sessions opened, used and closed through one
# `airlock mcp`: no growth of its memory, descriptors or processes.
# ASan's stack depot (the call stack of every allocation and free, kept
# for its reports) grows by about 1 MiB over these sessions and reads as
# resident growth: with malloc_context_size=0 the same run shows none
# (14412 -> 14412 KiB over 200 sessions, 2026-12-01), nor does the build
# without ASan. So no stacks are kept here: a report still names the bad
# access, and a rerun with stacks shows where the memory came from.
ASAN_OPTIONS="$ASAN_OPTIONS:malloc_context_size=0" \
/usr/bin/python3 tests/helpers/soak_sessions.py "$build/airlock" "${SOAK_SESSIONS:-1000}" \
    "$(( ${SOAK_SESSIONS:-1000} / 10 ))" 2>&1 | tee -a "$log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

# Reports of the host processes, of the template (its stderr is ours) and of
# LeakSanitizer at exit all land in the log.
reports=$(grep -cE 'ERROR: (Address|Leak|Undefined)Sanitizer|runtime error:|SUMMARY: .*Sanitizer' "$log")
echo "soak: sanitizer reports: $reports"
[ "$reports" -eq 0 ] || status=1
if grep -q 'LeakSanitizer has encountered a fatal error\|LeakSanitizer does not work' "$log"; then
    echo "soak: LeakSanitizer could not run here (see the log); leaks were not checked"
    status=1
fi

left=$(find "$work" -mindepth 1 | wc -l)
echo "soak: entries left in the staging folder $work: $left"
[ "$left" -eq 0 ] || { find "$work" -maxdepth 2 | head; status=1; }
echo "soak: sandbox processes on this machine: $before_templates before, $(template_count) after" \
    "(other users' sandboxes count too; the soak's own are checked above)"

rmdir "$work" 2>/dev/null
if [ $status -eq 0 ]; then
    rm -f "$log"
    echo "soak: passed"
else
    echo "soak: FAILED (log kept in $log)"
fi
exit $status
