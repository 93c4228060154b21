#!/usr/bin/env bash
# What a secret adds to the gateway's own time: builds bench/bench_secrets.c
# against the library and prints the medians of the rewrite functions alone
# (request headers substituted, a response scrubbed) and of a gateway request
# on loopback with and without a secret, interleaved in one run.
# usage: bench/bench_secrets.sh [BUILD_DIR] [RUNS]
set -euo pipefail
build=${1:-build}
runs=${2:-2000}
cd "$(dirname "$0")/.."
make --no-print-directory "$build/libairlock.a" >/dev/null
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch 2>/dev/null || true)
PKG_CONFIG="env -u PKG_CONFIG_PATH PKG_CONFIG_LIBDIR=${multiarch:+/usr/lib/$multiarch/pkgconfig:}/usr/share/pkgconfig:/usr/lib/pkgconfig /usr/bin/pkg-config"
libs="$($PKG_CONFIG --libs libseccomp jansson python3-embed) -lpthread -ldl"
cflags="$($PKG_CONFIG --cflags jansson)"
# shellcheck disable=SC2086 # flag lists
cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc/common -Isrc/lib $cflags -o "$build/bench_secrets" \
    bench/bench_secrets.c "$build/libairlock.a" $libs
"$build/bench_secrets" "$runs"
