#!/usr/bin/env bash
# Runs test tiers and ends with one closing line, "check: N passed, N failed".
# Each tier says what it needs:
#   unit      pure unit tests (tests/unit, cmocka): no sandbox, no namespaces,
#             no root (a few cases skip themselves without root);
#   sandbox   C tests that start real sandboxes (tests/sandbox, cmocka);
#   asan      both of those again, built with ASan/UBSan (build/asan);
#   openat2   the file-transfer tests with openat2 forced to fail (ENOSYS),
#             so the component-by-component fallback runs every time;
#   install   `make install` into a temporary DESTDIR and a program linked
#             through pkg-config, and the ABI check against abi/ (tests/build);
#   blackbox  the built airlock binary driven as users do (tests/blackbox);
#   cpython   CPython's own tests of the guest's areas, run inside the guest
#             (tests/cpython/run_in_guest.py; Debian's libpython3.11-testsuite);
#   python    the Python package (python/, built by `make python`) with
#             Debian's python3-pytest (tests/python);
#   docs      every runnable example of README.md and docs/*.md, run as a
#             reader copies it (tests/docs/test_examples.py; needs the
#             package of `make python` for the Python examples);
#   mcp       the MCP server driven by the official TypeScript SDK and the MCP
#             Inspector CLI, Vercel AI SDK, LangChain and Mastra clients (tests/mcp),
#             on stdio and over HTTP (airlock serve, test_mcp_http.mjs);
#   fuzz      fuzz corpus and crash replays;
#   multihost several airlock hosts: three airlock serve hosts, each in a
#             network namespace of its own, behind HAProxy, and a GlusterFS
#             volume of the tier's own FUSE-mounted once per host as a shared
#             --tenants-dir (tests/multihost); needs root, FUSE, ip netns and
#             haproxy: skipped with a one-line hint without them, and failed
#             instead as root (CI's case);
#   format    the format check and the layering check (scripts/layers.py).
# Every test file runs in its own process with a time limit. With -j N (or
# AIRLOCK_TEST_JOBS=N) up to N files run at once; their results are printed in
# the order above as soon as everything before them has ended, each with its
# time, so the output reads the same at any -j.
# Usage: tests/run.sh [-j N] BUILD_DIR [TIER...]   (no TIER: all of them, in that order)
set -uo pipefail
cd "$(dirname "$0")/.."
jobs=${AIRLOCK_TEST_JOBS:-1}
while [ $# -gt 0 ]; do
    case $1 in
    -j) jobs=${2:?run.sh: -j needs a number}; shift 2 ;;
    -j*) jobs=${1#-j}; shift ;;
    *) break ;;
    esac
done
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: -j takes a positive number, not '$jobs'" >&2; exit 2; }
build=${1:-build}
shift || true
all_tiers=(unit sandbox asan openat2 install blackbox cpython python docs mcp multihost fuzz format)
tiers=("$@")
[ ${#tiers[@]} -eq 0 ] && tiers=("${all_tiers[@]}")
for t in "${tiers[@]}"; do
    [[ " ${all_tiers[*]} " == *" $t "* ]] || { echo "run.sh: unknown tier '$t' (${all_tiers[*]})" >&2; exit 2; }
done
want() { [[ " ${tiers[*]} " == *" $1 "* ]]; }
export AIRLOCK="$PWD/$build/airlock" AIRLOCK_BUILD="$PWD/$build"
passed=0 failed=0 failures=()
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The queue: job i has a kind (say, counted, counted+skips, cmocka, pytest
# or status; counted+skips also prints the file's "skip ..." lines), a
# name, a time limit and a command line (quoted with printf %q). "say" jobs
# only print a heading at their place in the output.
kinds=() names=() limits=() cmds=()
say() { kinds+=(say); names+=("$1"); limits+=(0); cmds+=(""); }
queue() { # kind name limit cmd...
    kinds+=("$1"); names+=("$2"); limits+=("$3"); shift 3
    cmds+=("$(printf '%q ' "$@")")
}

record() { # name rc
    if [ "$2" -eq 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); failures+=("$1"); fi
}

# Tallies job i from its output and exit status and prints its line.
tally() { # i
    local i=$1 kind=${kinds[$1]} name=${names[$1]} out=$work/$1.out rc secs p f line
    [ "$kind" = say ] && { echo "${names[$i]}"; return; }
    rc=$(cat "$work/$i.rc") secs=$(cat "$work/$i.time")
    case $kind in
    counted | counted+skips)
        # A file's own tally: a line "NAME: N passed, N failed".
        line=$(grep -E '^[A-Za-z0-9_./-]+: [0-9]+ passed, [0-9]+ failed' "$out" | tail -1)
        if [ -n "$line" ]; then
            p=$(sed -E 's/.*: ([0-9]+) passed.*/\1/' <<<"$line")
            f=$(sed -E 's/.*passed, ([0-9]+) failed.*/\1/' <<<"$line")
            [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
        else
            p=$((rc == 0)) f=$((rc != 0))
        fi ;;
    cmocka)
        # cmocka prints "[  PASSED  ] N test(s)." and "[  FAILED  ] N test(s)".
        p=$(grep -E '^\[  PASSED  \] [0-9]+ test' "$out" | sed -E 's/.* ([0-9]+) test.*/\1/' | tail -1)
        f=$(grep -E '^\[  FAILED  \] [0-9]+ test' "$out" | sed -E 's/.* ([0-9]+) test.*/\1/' | tail -1)
        p=${p:-0} f=${f:-0}
        [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1 ;;
    pytest)
        # pytest's summary: "N passed, M failed, K errors in T s" (any order).
        line=$(grep -E '[0-9]+ (passed|failed|error)' "$out" | tail -1)
        p=$(grep -oE '[0-9]+ passed' <<<"$line" | cut -d' ' -f1)
        f=0
        for k in $(grep -oE '[0-9]+ (failed|errors?)' <<<"$line" | cut -d' ' -f1); do f=$((f + k)); done
        p=${p:-0}
        [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ] && [ "$f" -eq 0 ] && f=1 ;;
    status)
        p=$((rc == 0)) f=$((rc != 0)) ;;
    esac
    passed=$((passed + p)) failed=$((failed + f))
    if [ "$f" -gt 0 ]; then
        failures+=("$name")
        cat "$out"
    elif [ "$kind" = counted+skips ]; then
        # What it left out, and why, also when it passed.
        grep '^skip ' "$out"
    fi
    if [ "$rc" -eq 124 ]; then echo "$name: $p passed, $f failed (timed out after ${limits[$i]} s)"
    else echo "$name: $p passed, $f failed  [$secs s]"; fi
}

# Runs the queue, at most $jobs at once, printing each result in queue order.
run_queue() {
    local n=${#kinds[@]} next=0 printed=0 running=0
    while [ "$printed" -lt "$n" ]; do
        while [ "$next" -lt "$n" ] && [ "$running" -lt "$jobs" ]; do
            if [ "${kinds[$next]}" != say ]; then
                (
                    start=$(date +%s%N)
                    eval "timeout ${limits[$next]} ${cmds[$next]}" >"$work/$next.out" 2>&1 </dev/null
                    rc=$?
                    end=$(date +%s%N)
                    printf '%d.%d\n' $(((end - start) / 1000000000)) $(((end - start) / 100000000 % 10)) \
                        >"$work/$next.time"
                    echo $rc >"$work/$next.rc.tmp" && mv "$work/$next.rc.tmp" "$work/$next.rc"
                ) &
                running=$((running + 1))
            fi
            next=$((next + 1))
        done
        while [ "$printed" -lt "$next" ] &&
            { [ "${kinds[$printed]}" = say ] || [ -f "$work/$printed.rc" ]; }; do
            tally "$printed"
            printed=$((printed + 1))
        done
        if [ "$printed" -lt "$n" ]; then
            wait -n 2>/dev/null
            running=$(jobs -rp | wc -l)
        fi
    done
    wait
}

# The binaries of one tier of C tests, from where their sources live.
tier_bins() { # build_dir tier_folder
    local src
    for src in tests/"$2"/test_*.c; do
        [ -f "$src" ] || continue
        echo "$1/tests/$(basename "$src" .c)"
    done
}

queue_c_tier() { # title folder
    say "== $1"
    local t
    for t in $(tier_bins "$build" "$2"); do
        if [ -x "$t" ]; then queue cmocka "$(basename "$t")" 600 "$t"
        else record "$(basename "$t")" 1; echo "$(basename "$t"): FAILED: not built"; fi
    done
}
want unit && queue_c_tier "unit tests (no sandbox)" unit
want sandbox && queue_c_tier "sandbox tests (C, real sandboxes)" sandbox

# The same unit tests built with ASan/UBSan (make check builds them first,
# into build/asan): memory errors, undefined behaviour and, where
# LeakSanitizer can run, leaks. AIRLOCK_TEST_QUICK=1 lets a test leave out
# what is too slow under the sanitizers. Missing when the build was skipped.
if want asan; then
    say "== unit and sandbox tests under ASan/UBSan"
    asan_build=${AIRLOCK_ASAN_BUILD:-build/asan}
    if [ "$(realpath -m "$asan_build")" = "$(realpath -m "$build")" ]; then
        echo "asan: the tests above were the sanitizer build already"
    elif ls "$asan_build"/tests/test_* >/dev/null 2>&1; then
        for t in $(tier_bins "$asan_build" unit) $(tier_bins "$asan_build" sandbox); do
            [ -x "$t" ] || continue
            queue cmocka "$(basename "$t")[asan]" 600 env AIRLOCK_TEST_QUICK=1 \
                ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}" \
                UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}" "$t"
        done
    else
        record "asan-build" 1
        echo "asan: FAILED: no sanitizer build of the tests in $asan_build (make SAN=asan tests)"
    fi
fi

if want openat2; then
    say "== file transfer tests with openat2 forced to ENOSYS"
    if [ -x "$build/tests/no_openat2" ]; then
        for t in "$build"/tests/test_fsx*; do
            [ -x "$t" ] || continue
            queue cmocka "$(basename "$t")[no-openat2]" 600 "$build/tests/no_openat2" "$t"
        done
    fi
fi

if want install; then
    say "== install and link through pkg-config"
    for t in tests/build/test_*.sh; do
        [ -f "$t" ] || continue
        queue counted "$(basename "$t" .sh)" 1200 bash "$t" "$build"
    done
fi

if want blackbox; then
    say "== black-box tests"
    for t in tests/blackbox/test_*.py; do
        [ -f "$t" ] || continue
        queue counted "$(basename "$t" .py)" 1200 /usr/bin/python3 "$t"
    done
fi

if want cpython; then
    say "== CPython's own tests inside the guest (tests/cpython)"
    for m in $(/usr/bin/python3 tests/cpython/run_in_guest.py --list); do
        queue counted "cpython/$m" 1200 /usr/bin/python3 tests/cpython/run_in_guest.py "$m"
    done
fi

if want python; then
    say "== the Python package (tests/python, pytest)"
    if ls python/airlock/_airlock*.so >/dev/null 2>&1; then
        for t in tests/python/test_*.py; do
            queue pytest "python/$(basename "$t" .py)" 1200 env AIRLOCK_BUILD="$PWD/$build" \
                /usr/bin/python3 -m pytest -q -p no:cacheprovider "$t"
        done
    else
        echo "python: the extension is not built (make python)"; record python 1
    fi
fi

# The npm packages of tests/mcp (the SDK clients; the docs tier's JavaScript
# example imports the SDK from there too). Installs when any package listed
# in package.json is missing (the versions are pinned there and in
# package-lock.json).
npm_deps() {
    missing=$(cd tests/mcp && node -e '
        const fs = require("fs");
        const deps = Object.keys(require("./package.json").dependencies || {});
        console.log(deps.filter((d) => !fs.existsSync(`node_modules/${d}/package.json`)).join(" "));' 2>/dev/null ||
        echo "?")
    if [ -n "$missing" ]; then
        (cd tests/mcp && npm install --no-audit --no-fund --silent >/dev/null 2>&1) ||
            echo "npm install in tests/mcp failed (missing: $missing)"
    fi
}

if want docs; then
    say "== the documents' examples, run as written (tests/docs)"
    npm_deps
    queue counted+skips docs 1200 /usr/bin/python3 tests/docs/test_examples.py
fi

if want mcp && [ -f tests/mcp/package.json ]; then
    say "== MCP tests with the official SDK client and the third-party clients"
    npm_deps
    for t in tests/mcp/test_*.mjs; do
        [ -f "$t" ] || continue
        queue counted "$(basename "$t" .mjs)" 1200 node "$t"
    done
fi

if want fuzz; then
    say "== fuzz corpus replays"
    for t in "$build"/fuzz/replay_*; do
        [ -x "$t" ] || continue
        queue counted "$(basename "$t")" 1200 "$t"
    done
fi

if want multihost; then
    say "== many hosts: shared storage and peers (tests/multihost)"
    for t in tests/multihost/test_*.py; do
        [ -f "$t" ] || continue
        queue counted+skips "multihost/$(basename "$t" .py)" 1800 /usr/bin/python3 "$t"
    done
fi

if want format; then
    say "== format and layering checks"
    queue status format 600 make --no-print-directory format-check
    # The folders of src/ against the layer order of docs/internals.md.
    queue status layers 120 /usr/bin/python3 scripts/layers.py "$build"
    # No function of src/ over 120 lines but those scripts/funclen.py lists.
    queue status funclen 120 /usr/bin/python3 scripts/funclen.py
fi

run_queue

if [ ${#failures[@]} -gt 0 ]; then echo "failed: ${failures[*]}"; fi
echo "check: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
