#!/usr/bin/env bash
# The scrub's cost per MiB of text: builds bench/bench_scrub.c against the
# library and prints the medians (ms per MiB).
# usage: bench/bench_scrub.sh [BUILD_DIR] [RUNS]
set -euo pipefail
build=${1:-build}
runs=${2:-15}
cd "$(dirname "$0")/.."
make --no-print-directory "$build/libairlock.a" >/dev/null
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch 2>/dev/null || true)
PKG_CONFIG="env -u PKG_CONFIG_PATH PKG_CONFIG_LIBDIR=${multiarch:+/usr/lib/$multiarch/pkgconfig:}/usr/share/pkgconfig:/usr/lib/pkgconfig /usr/bin/pkg-config"
libs="$($PKG_CONFIG --libs libseccomp jansson python3-embed) -lpthread -ldl"
cflags="$($PKG_CONFIG --cflags jansson)"
# shellcheck disable=SC2086 # flag lists
cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc/common -Isrc/lib $cflags -o "$build/bench_scrub" \
    bench/bench_scrub.c "$build/libairlock.a" $libs
"$build/bench_scrub" "$runs"
