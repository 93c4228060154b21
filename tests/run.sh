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
#             through pkg-config (tests/build);
#   blackbox  the built airlock binary driven as users do (tests/blackbox);
#   cpython   CPython's own tests of the guest's areas, run inside the guest
#             (tests/cpython/run_in_guest.py; Debian's libpython3.11-testsuite);
#   python    the Python package (python/, built by `make python`) with
#             Debian's python3-pytest (tests/python);
#   mcp       the MCP server driven by the official TypeScript SDK and the MCP
#             Inspector CLI, Vercel AI SDK, LangChain and Mastra clients (tests/mcp),
#             on stdio and over HTTP (airlock serve, test_mcp_http.mjs);
#   fuzz      fuzz corpus and crash replays;
#   format    the format check.
# Every C test runs in its own process with a time limit.
# Usage: tests/run.sh BUILD_DIR [TIER...]   (no TIER: all of them, in that order)
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
all_tiers=(unit sandbox asan openat2 install blackbox cpython python mcp fuzz format)
tiers=("$@")
[ ${#tiers[@]} -eq 0 ] && tiers=("${all_tiers[@]}")
for t in "${tiers[@]}"; do
    [[ " ${all_tiers[*]} " == *" $t "* ]] || { echo "run.sh: unknown tier '$t' (${all_tiers[*]})" >&2; exit 2; }
done
want() { [[ " ${tiers[*]} " == *" $1 "* ]]; }
export AIRLOCK="$PWD/$build/airlock" AIRLOCK_BUILD="$PWD/$build"
passed=0 failed=0 failures=()

record() { # name rc
    if [ "$2" -eq 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); failures+=("$1"); fi
}

# A tier's own tally: lines "NAME: N passed, N failed" add to the totals.
run_counted() { # name cmd...
    local name=$1; shift
    local out rc
    out=$(mktemp)
    timeout 1200 "$@" >"$out" 2>&1
    rc=$?
    local line
    line=$(grep -E '^[A-Za-z0-9_./-]+: [0-9]+ passed, [0-9]+ failed' "$out" | tail -1)
    if [ -n "$line" ]; then
        local p f
        p=$(sed -E 's/.*: ([0-9]+) passed.*/\1/' <<<"$line")
        f=$(sed -E 's/.*passed, ([0-9]+) failed.*/\1/' <<<"$line")
        passed=$((passed + p)); failed=$((failed + f))
        if [ "$f" -gt 0 ] || [ $rc -ne 0 ]; then
            [ "$f" -eq 0 ] && failed=$((failed + 1))
            failures+=("$name"); cat "$out"
        fi
        echo "$line"
    else
        record "$name" $rc
        [ $rc -ne 0 ] && cat "$out"
        echo "$name: $([ $rc -eq 0 ] && echo ok || echo FAILED rc=$rc)"
    fi
    rm -f "$out"
}

# cmocka prints "[  PASSED  ] N test(s)." and "[  FAILED  ] N test(s)".
run_cmocka() { # name cmd...
    local name=$1; shift
    local out rc
    out=$(mktemp)
    timeout 600 "$@" >"$out" 2>&1
    rc=$?
    local p f
    p=$(grep -E '^\[  PASSED  \] [0-9]+ test' "$out" | sed -E 's/.* ([0-9]+) test.*/\1/' | tail -1)
    f=$(grep -E '^\[  FAILED  \] [0-9]+ test' "$out" | sed -E 's/.* ([0-9]+) test.*/\1/' | tail -1)
    p=${p:-0}; f=${f:-0}
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    passed=$((passed + p)); failed=$((failed + f))
    if [ "$f" -gt 0 ]; then failures+=("$name"); cat "$out"; fi
    echo "$name: $p passed, $f failed"
    rm -f "$out"
}

# The binaries of one tier of C tests, from where their sources live.
tier_bins() { # build_dir tier_folder
    local src
    for src in tests/"$2"/test_*.c; do
        [ -f "$src" ] || continue
        echo "$1/tests/$(basename "$src" .c)"
    done
}

run_c_tier() { # title folder
    echo "== $1"
    local t
    for t in $(tier_bins "$build" "$2"); do
        if [ -x "$t" ]; then run_cmocka "$(basename "$t")" "$t"
        else record "$(basename "$t")" 1; echo "$(basename "$t"): FAILED: not built"; fi
    done
}
want unit && run_c_tier "unit tests (no sandbox)" unit
want sandbox && run_c_tier "sandbox tests (C, real sandboxes)" sandbox

# The same unit tests built with ASan/UBSan (make check builds them first,
# into build/asan): memory errors, undefined behaviour and, where
# LeakSanitizer can run, leaks. AIRLOCK_TEST_QUICK=1 lets a test leave out
# what is too slow under the sanitizers. Missing when the build was skipped.
if want asan; then
    echo "== unit and sandbox tests under ASan/UBSan"
    asan_build=${AIRLOCK_ASAN_BUILD:-build/asan}
    if [ "$(realpath -m "$asan_build")" = "$(realpath -m "$build")" ]; then
        echo "asan: the tests above were the sanitizer build already"
    elif ls "$asan_build"/tests/test_* >/dev/null 2>&1; then
        for t in $(tier_bins "$asan_build" unit) $(tier_bins "$asan_build" sandbox); do
            [ -x "$t" ] || continue
            run_cmocka "$(basename "$t")[asan]" env AIRLOCK_TEST_QUICK=1 \
                ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}" \
                UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}" "$t"
        done
    else
        record "asan-build" 1
        echo "asan: FAILED: no sanitizer build of the tests in $asan_build (make SAN=asan tests)"
    fi
fi

if want openat2; then
    echo "== file transfer tests with openat2 forced to ENOSYS"
    if [ -x "$build/tests/no_openat2" ]; then
        for t in "$build"/tests/test_fsx*; do
            [ -x "$t" ] || continue
            run_cmocka "$(basename "$t")[no-openat2]" "$build/tests/no_openat2" "$t"
        done
    fi
fi

if want install; then
    echo "== install and link through pkg-config"
    for t in tests/build/test_*.sh; do
        [ -f "$t" ] || continue
        run_counted "$(basename "$t" .sh)" bash "$t" "$build"
    done
fi

if want blackbox; then
    echo "== black-box tests"
    for t in tests/blackbox/test_*.py; do
        [ -f "$t" ] || continue
        run_counted "$(basename "$t" .py)" /usr/bin/python3 "$t"
    done
fi

if want cpython; then
    echo "== CPython's own tests inside the guest (tests/cpython)"
    run_counted cpython /usr/bin/python3 tests/cpython/run_in_guest.py
fi

if want python; then
    echo "== the Python package (tests/python, pytest)"
    if ls python/airlock/_airlock*.so >/dev/null 2>&1; then
        run_counted python env AIRLOCK_BUILD="$PWD/$build" /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/python
    else
        echo "python: the extension is not built (make python)"; record python 1
    fi
fi

if want mcp && [ -f tests/mcp/package.json ]; then
    echo "== MCP tests with the official SDK client and the third-party clients"
    # Installs when any package listed in package.json is missing (the
    # versions are pinned there and in package-lock.json).
    missing=$(cd tests/mcp && node -e '
        const fs = require("fs");
        const deps = Object.keys(require("./package.json").dependencies || {});
        console.log(deps.filter((d) => !fs.existsSync(`node_modules/${d}/package.json`)).join(" "));' 2>/dev/null ||
        echo "?")
    if [ -n "$missing" ]; then
        (cd tests/mcp && npm install --no-audit --no-fund --silent >/dev/null 2>&1) ||
            echo "npm install in tests/mcp failed (missing: $missing)"
    fi
    for t in tests/mcp/test_*.mjs; do
        [ -f "$t" ] || continue
        run_counted "$(basename "$t" .mjs)" node "$t"
    done
fi

if want fuzz; then
    echo "== fuzz corpus replays"
    for t in "$build"/fuzz/replay_*; do
        [ -x "$t" ] || continue
        run_counted "$(basename "$t")" "$t"
    done
fi

if want format; then
    echo "== format check"
    if make --no-print-directory format-check >/dev/null 2>&1; then record format 0; echo "format: ok"
    else record format 1; echo "format: FAILED (run make format)"; fi
fi

if [ ${#failures[@]} -gt 0 ]; then echo "failed: ${failures[*]}"; fi
echo "check: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
