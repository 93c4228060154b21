#!/usr/bin/env bash
# make demo: runs examples/analyze.py in the sandbox over the bundled
# examples/sales workspace, then shows what came back.
set -euo pipefail
airlock=${1:-build/airlock}
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d /tmp/airlock-demo-XXXXXX)
rmdir "$out"
trap 'rm -rf "$out"' EXIT

echo "\$ airlock run --workspace examples/sales --output-dir $out examples/analyze.py"
"$airlock" run --workspace "$here/sales" --output-dir "$out" "$here/analyze.py"
echo
echo "files written by the guest to /output, returned to $out:"
ls -l "$out"
echo
echo "--- summary.csv"
cat "$out/summary.csv"
echo
echo "\$ airlock run --json -c '...'   (the result JSON an agent receives)"
"$airlock" run --json --workspace "$here/sales" \
    -c 'import os; print(os.listdir("/input")); open("/output/hello.txt", "w").write("hi\n")'
