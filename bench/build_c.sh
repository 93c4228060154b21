# Sourced by the benchmarks written in C (bench_scrub.sh, bench_secrets.sh,
# bench_tools.sh): bench_build NAME builds bench/NAME.c against the library's
# archive in $build, with Debian's pkg-config whatever is first on PATH, as
# the Makefile does, into $build/NAME.
bench_build() {
    local name=$1 multiarch pkg_config libs cflags
    make --no-print-directory "$build/libairlock.a" >/dev/null
    multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch 2>/dev/null || true)
    pkg_config="env -u PKG_CONFIG_PATH PKG_CONFIG_LIBDIR=${multiarch:+/usr/lib/$multiarch/pkgconfig:}/usr/share/pkgconfig:/usr/lib/pkgconfig /usr/bin/pkg-config"
    libs="$($pkg_config --libs libseccomp jansson python3-embed) -lpthread -ldl"
    cflags="$($pkg_config --cflags jansson)"
    # shellcheck disable=SC2086 # flag lists
    cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc/common -Isrc/lib $cflags -o "$build/$name" \
        "bench/$name.c" "$build/libairlock.a" $libs
}
