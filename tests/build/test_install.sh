#!/usr/bin/env bash
# The installed library as a user gets it: `make install` into a temporary
# DESTDIR, then a small program compiled and linked with nothing but
# `pkg-config --cflags --libs airlock`, run against the installed copy (one
# sandbox, one run). Also: the library's SONAME, its exports (exactly the
# AIRLOCK_PUBLIC functions of airlock.h), the installed airlock program, the
# static library and Libs.private, ldconfig or its hint after an install
# without DESTDIR, the error when the template cannot load the library, and
# the C programs of README.md and docs/c-api.md as a user copies them.
# Usage: tests/build/test_install.sh BUILD_DIR
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
. tests/build/lib.sh

dest=$(mktemp -d /tmp/airlock-install.XXXXXX)
trap 'rm -rf "$dest"' EXIT
prefix=/usr/local

install_ok() {
    make --no-print-directory -s install BUILD="$build" DESTDIR="$dest" PREFIX="$prefix" >"$dest/install.log" 2>&1 ||
        { cat "$dest/install.log"; return 1; }
    for f in bin/airlock share/man/man1/airlock.1 share/bash-completion/completions/airlock include/airlock.h include/airlock-jansson.h lib/libairlock.so lib/libairlock.so.0 lib/pkgconfig/airlock.pc; do
        [ -e "$dest$prefix/$f" ] || { echo "missing $prefix/$f"; return 1; }
    done
}
# A checkout where airlock.pc was made before with another prefix: the
# install must not copy that stale file.
make --no-print-directory -s BUILD="$build" PREFIX=/opt/stale-prefix "$build/airlock.pc" >/dev/null 2>&1
check "make install puts the library, header, program and airlock.pc in DESTDIR" install_ok
pc_prefix_ok() {
    local got
    got=$(sed -n 's/^prefix=//p' "$dest$prefix/lib/pkgconfig/airlock.pc")
    [ "$got" = "$prefix" ] || { echo "the installed airlock.pc says prefix=$got, not $prefix"; return 1; }
}
check "the installed airlock.pc names the install's prefix, not an earlier build's" pc_prefix_ok

lib=$dest$prefix/lib/libairlock.so.0
soname_ok() {
    local so
    so=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')
    [ "$so" = libairlock.so.0 ] || { echo "SONAME is '$so'"; return 1; }
}
check "the library's SONAME is libairlock.so.0" soname_ok

exports_ok() {
    local want got
    want=$(cat include/airlock.h include/airlock-jansson.h | grep -E '^AIRLOCK_PUBLIC' | sed -E 's/.*[ *](airlock_[a-z0-9_]+)\(.*/\1/' | sort -u)
    got=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBR]$/ {sub(/@.*/, "", $3); print $3}' | sort -u)
    [ "$want" = "$got" ] || { diff <(echo "$want") <(echo "$got"); return 1; }
}
check "the library exports exactly the AIRLOCK_PUBLIC functions of airlock.h and airlock-jansson.h" exports_ok

cat >"$dest/tiny.c" <<'C'
#include <airlock.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void)
{
        airlock_error err = {0};
        airlock_config *cfg;
        airlock_sandbox *sb;
        airlock_result *res;
        if (airlock_config_new(&cfg, &err) < 0 || airlock_sandbox_new(cfg, &sb, &err) < 0) {
                fprintf(stderr, "tiny: %s\n", err.message);
                return 3;
        }
        const char *code = "print(6 * 7)";
        if (airlock_sandbox_run(sb, code, strlen(code), NULL, &res, &err) < 0) {
                fprintf(stderr, "tiny: %s\n", err.message);
                return 1;
        }
        char *json = airlock_result_to_json(res);
        puts(json ? json : "null");
        free(json);
        airlock_result_free(res);
        airlock_sandbox_close(sb);
        airlock_config_free(cfg);
        return 0;
}
C
link_ok() {
    local flags
    # The sysroot prefixes the .pc's -I and -L with DESTDIR, as for a staged
    # install; the .pc itself names /usr/local.
    flags=$(PKG_CONFIG_PATH="$dest$prefix/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$dest" \
        pkg-config --cflags --libs airlock) || return 1
    # The rpath stands for the loader's default folders of a real install:
    # the template is the program executed afresh with an empty environment,
    # so LD_LIBRARY_PATH would not reach it.
    # shellcheck disable=SC2086
    cc -std=c11 -Wall -Werror -o "$dest/tiny" "$dest/tiny.c" $flags \
        -Wl,-rpath,"$dest$prefix/lib" || return 1
    readelf -d "$dest/tiny" | grep -q 'NEEDED.*\[libairlock.so.0\]' ||
        { echo "tiny does not need libairlock.so.0"; return 1; }
    local out
    out=$(timeout 120 "$dest/tiny") || { echo "tiny: $out"; return 1; }
    grep -q '"stdout": *"42\\n"' <<<"$out" || { echo "tiny printed: $out"; return 1; }
}
check "a program built with pkg-config --cflags --libs airlock runs code through the installed library" link_ok

# A library outside the loader's folders, found through LD_LIBRARY_PATH: the
# program starts, its template (executed afresh with an empty environment)
# cannot; the error names the library and the ways out, not "Broken pipe".
unfound_ok() {
    local flags out
    flags=$(PKG_CONFIG_PATH="$dest$prefix/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$dest" \
        pkg-config --cflags --libs airlock) || return 1
    # shellcheck disable=SC2086
    cc -std=c11 -o "$dest/tiny-norpath" "$dest/tiny.c" $flags || return 1
    out=$(LD_LIBRARY_PATH="$dest$prefix/lib" timeout 120 "$dest/tiny-norpath" 2>&1)
    [ $? -eq 3 ] || { echo "tiny-norpath: $out"; return 1; }
    grep -q "sandbox unavailable: the sandbox's template .* cannot load $dest$prefix/lib/libairlock.so.0:" <<<"$out" &&
        grep -q "LD_LIBRARY_PATH does not reach the template; run ldconfig" <<<"$out" &&
        grep -q -- "-Wl,-rpath,$dest$prefix/lib" <<<"$out" ||
        { echo "tiny-norpath: $out"; return 1; }
}
check "a library the template's loader cannot find is an error naming it and the fix" unfound_ok

# The static library and airlock.pc's Libs.private: linked as c-api.md says,
# the program needs no libairlock.so and runs.
static_ok() {
    local pc="$dest$prefix/lib/pkgconfig/airlock.pc" libdir out
    [ -f "$dest$prefix/lib/libairlock.a" ] || { echo "no libairlock.a"; return 1; }
    grep -q '^Libs.private: .*-lseccomp.*-ljansson.*-lpthread' "$pc" || { cat "$pc"; return 1; }
    libdir=$(PKG_CONFIG_PATH="$dest$prefix/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$dest" \
        pkg-config --variable=libdir airlock) || return 1
    # shellcheck disable=SC2046
    cc -o "$dest/tiny-static" "$dest/tiny.c" $(PKG_CONFIG_PATH="$dest$prefix/lib/pkgconfig" \
        PKG_CONFIG_SYSROOT_DIR="$dest" pkg-config --cflags airlock) -Wl,--as-needed \
        "$libdir/libairlock.a" $(PKG_CONFIG_PATH="$dest$prefix/lib/pkgconfig" \
        PKG_CONFIG_SYSROOT_DIR="$dest" pkg-config --libs --static airlock) || return 1
    ! readelf -d "$dest/tiny-static" | grep -q 'NEEDED.*libairlock' ||
        { echo "tiny-static needs libairlock.so"; return 1; }
    out=$(timeout 120 "$dest/tiny-static") || { echo "tiny-static: $out"; return 1; }
    grep -q '"stdout": *"42\\n"' <<<"$out" || { echo "tiny-static printed: $out"; return 1; }
}
check "make install installs libairlock.a, and airlock.pc's Libs.private links it" static_ok

# make install without DESTDIR: ldconfig where the loader searches libdir,
# else the line that adds it; with DESTDIR (a packager's staging) neither.
ldconfig_ok() {
    local p="$dest/own-prefix" log
    log=$(make --no-print-directory -s install BUILD="$build" PREFIX="$p" 2>&1) || { echo "$log"; return 1; }
    grep -qF "echo $p/lib > /etc/ld.so.conf.d/airlock.conf && ldconfig" <<<"$log" &&
        grep -qF -- "-Wl,-rpath,$p/lib" <<<"$log" || { echo "install printed: $log"; return 1; }
    log=$(make --no-print-directory -s install BUILD="$build" PREFIX="$p" LOADER_DIRS="/usr/lib $p/lib" \
        LDCONFIG="echo RAN-LDCONFIG" 2>&1) || { echo "$log"; return 1; }
    grep -qx RAN-LDCONFIG <<<"$log" && ! grep -q 'ld.so.conf.d' <<<"$log" ||
        { echo "install printed: $log"; return 1; }
    ! grep -q 'ldconfig\|ld.so.conf' "$dest/install.log" || { cat "$dest/install.log"; return 1; }
}
check "make install runs ldconfig for a folder the loader searches, else prints the line to add" ldconfig_ok

# The C programs of README.md and docs/c-api.md, as a user copies them:
# each fenced C block compiled as it stands against the installed library
# with the flags the text gives, run from the repository (where
# examples/sales is), and what the text says it prints.
doc_snippets_ok() {
    local doc n=0 f flags out empty=$dest/empty-dir
    mkdir -p "$empty"
    flags=$(PKG_CONFIG_PATH="$dest$prefix/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$dest" \
        pkg-config --cflags --libs airlock) || return 1
    for doc in README.md docs/c-api.md; do
        awk -v out="$dest/doc-$(basename "$doc" .md)-" '
            /^```c$/ { n++; f = out n ".c"; next }
            /^```/ { f = ""; next }
            f { print > f }' "$doc"
    done
    for f in "$dest"/doc-*.c; do
        n=$((n + 1))
        # shellcheck disable=SC2086
        cc -Wall -Wextra -Werror -o "${f%.c}" "$f" $flags -Wl,-rpath,"$dest$prefix/lib" ||
            { echo "$f does not compile"; return 1; }
        out=$(timeout 120 "${f%.c}") || { echo "$f exited $?: $out"; return 1; }
        if grep -q examples/sales "$f"; then
            grep -qF '"stdout":"(12, 5)\n"' <<<"$out" || { echo "$f printed: $out"; return 1; }
            # Where examples/sales is missing: its error, and no crash.
            out=$(cd "$empty" && timeout 120 "${f%.c}" 2>&1)
            [ $? -eq 1 ] && [ "$out" = "cannot open examples/sales: No such file or directory" ] ||
                { echo "$f without examples/sales: $out"; return 1; }
        elif grep -q airlock_session_open "$f"; then
            [ "$out" = "A-17 shipped" ] || { echo "$f printed: $out"; return 1; }
        fi
    done
    [ "$n" -ge 3 ] || { echo "only $n C blocks in README.md and docs/c-api.md"; return 1; }
}
check "the C programs of README.md and docs/c-api.md compile as written and print what the text says" doc_snippets_ok

program_ok() {
    "$dest$prefix/bin/airlock" version | grep -q '^airlock [0-9]' || return 1
    [ "$(timeout 120 "$dest$prefix/bin/airlock" run -c 'print(6 * 7)')" = 42 ]
}
check "the installed airlock program runs" program_ok

finish test_install
