#!/usr/bin/env bash
# The guest runtime's bytecode that the build embeds (scripts/embed_runtime.sh),
# which the template loads instead of compiling the source at every start
# (guest.c, runtime_code): it must be there when the build has the Python of
# the embedded libpython's version, carry that version's magic number, and be
# the very code the template would otherwise compile from the embedded source
# (same name, flags and optimisation level), so that loading it changes
# nothing the guest can see. And a sandbox runs with it.
# Usage: tests/build/test_runtime_bytecode.sh BUILD_DIR
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
. tests/build/lib.sh

gen="$build/gen"
py=/usr/bin/python3
version=$(env -u PKG_CONFIG_PATH pkg-config --modversion python3-embed 2>/dev/null)

have_python() {
    [ -n "$version" ] && [ "$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" = "$version" ]
}

bytecode_is_the_source() {
    "$py" - "$gen/runtime.pyc" "$gen/runtime_full.py" <<'PY'
import importlib.util, marshal, sys
blob = open(sys.argv[1], "rb").read()
src = open(sys.argv[2], "rb").read()
if blob[:4] != importlib.util.MAGIC_NUMBER:
    sys.exit(f"magic {blob[:4]!r}, not this Python's {importlib.util.MAGIC_NUMBER!r}")
code = marshal.loads(blob[4:])
want = compile(src, "<airlock-runtime>", "exec", dont_inherit=True, optimize=0)
if code != want or code.co_filename != want.co_filename:
    sys.exit("the embedded bytecode is not the compiled runtime source")
PY
}

array_is_embedded() {
    # The generated C holds the same bytes as the .pyc (its size + the NUL).
    local n
    n=$(stat -c %s "$gen/runtime.pyc")
    grep -q "guest_runtime_pyc\[\]" "$gen/guest_runtime.c" &&
        [ "$(sed -n '/guest_runtime_pyc\[\] = {/,/};/p' "$gen/guest_runtime.c" | grep -o '0x' | wc -l)" -eq $((n + 1)) ]
}

runs() {
    [ "$("$build/airlock" run -c 'import sys; print(sys.modules["_airlock_runtime"]._run.__code__.co_filename)')" = "<airlock-runtime>" ]
}

if have_python; then
    check "bytecode built" test -s "$gen/runtime.pyc"
    check "bytecode is the compiled runtime source" bytecode_is_the_source
    check "bytecode embedded in the library" array_is_embedded
else
    echo "# no $py of version $version: the template compiles the source (nothing to check)"
fi
check "a sandbox runs the runtime" runs
finish test_runtime_bytecode
