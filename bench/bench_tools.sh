#!/usr/bin/env bash
# What a host tool call costs on top of the command it runs: builds
# bench/bench_tools.c against the library and prints, per command, the median
# time of starting it alone and of a full tools_call() (validation, spawn,
# arguments on stdin, JSON result on stdout, reap), and of a C callback tool.
# usage: bench/bench_tools.sh [BUILD_DIR] [RUNS]
set -euo pipefail
build=${1:-build}
runs=${2:-200}
cd "$(dirname "$0")/.."
make --no-print-directory "$build/libairlock.a" >/dev/null
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch 2>/dev/null || true)
PKG_CONFIG="env -u PKG_CONFIG_PATH PKG_CONFIG_LIBDIR=${multiarch:+/usr/lib/$multiarch/pkgconfig:}/usr/share/pkgconfig:/usr/lib/pkgconfig /usr/bin/pkg-config"
libs="$($PKG_CONFIG --libs libseccomp jansson python3-embed) -lpthread"
cflags="$($PKG_CONFIG --cflags jansson)"
# shellcheck disable=SC2086 # flag lists
cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc/common -Isrc/lib $cflags -o "$build/bench_tools" \
    bench/bench_tools.c "$build/libairlock.a" $libs
"$build/bench_tools" "$runs"
