#!/usr/bin/env bash
# File transfer benchmark: airlock's staging and capture against `cp -a` of
# the same trees, in the same run, printed as a Markdown table.
#   bash bench/bench_fsx.sh [BUILD_DIR] [--quick]
# BUILD_DIR defaults to build; the library is built there if needed. Temporary
# data (up to about 2.2 GiB) goes under $TMPDIR or /tmp and is removed.
# This is a measurement, not a test: nothing here passes or fails on time.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
args=()
for a in "$@"; do
    case $a in
        --quick) args+=(--quick) ;;
        -*) echo "usage: bench/bench_fsx.sh [BUILD_DIR] [--quick]" >&2; exit 2 ;;
        *) build=$a ;;
    esac
done

# The fsx objects and util are all the program needs from the library.
make -s --no-print-directory "$build/libairlock.a" >&2
mkdir -p "$build/bench"
${CC:-cc} -O2 -g -std=c11 -D_GNU_SOURCE -Iinclude -Isrc/common -Isrc/lib -Wall -Wextra -Werror \
    -Wno-unused-parameter -o "$build/bench/bench_fsx" bench/bench_fsx.c \
    "$build/libairlock.a" -lpthread
exec "$build/bench/bench_fsx" --dir "${TMPDIR:-/tmp}" "${args[@]}"
