#!/usr/bin/env bash
# The library's ABI against the recorded one (abi/libairlock.abi, written by
# `make abi-baseline`), with libabigail's abidiff: an incompatible change
# (a removed function, a changed struct layout or signature) fails, and so
# does a compatible one (a new function) until the baseline records it, so
# that every change of libairlock.so.0's ABI is a decision taken in a
# commit, not an accident. An incompatible change also needs a new SONAME
# (SOMAJOR in the Makefile).
# Usage: tests/build/test_abi.sh BUILD_DIR
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
. tests/build/lib.sh

abi_ok() {
    command -v abidiff >/dev/null || { echo "abidiff is missing (make deps installs abigail-tools)"; return 1; }
    local out rc
    out=$(abidiff --headers-dir2 include --drop-private-types abi/libairlock.abi "$build/libairlock.so" 2>&1)
    rc=$?
    # abidiff's status is a bit mask: 1 error, 2 usage, 4 ABI change,
    # 8 incompatible ABI change.
    [ $rc -eq 0 ] && return 0
    echo "$out"
    if [ $((rc & 3)) -ne 0 ]; then
        echo "abidiff failed (status $rc)"
    elif [ $((rc & 8)) -ne 0 ]; then
        echo "libairlock.so breaks the ABI of abi/libairlock.abi. If that is intended, raise SOMAJOR in the Makefile and run make abi-baseline."
    else
        echo "libairlock.so changes the ABI of abi/libairlock.abi (above). Additions at the end of a growable struct and new functions are compatible: run make abi-baseline and commit it. Anything else that moves a field callers fill in breaks them: raise SOMAJOR too."
    fi
    return 1
}
check "libairlock.so has exactly the ABI of abi/libairlock.abi" abi_ok

finish test_abi
