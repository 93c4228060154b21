#!/usr/bin/env bash
# make demo: runs examples/analyze.py in the sandbox over the bundled
# examples/sales workspace (pandas and matplotlib in the guest), then shows
# what came back. The files stay in build/demo, the chart among them.
set -euo pipefail
airlock=${1:-build/airlock}
here=$(cd "$(dirname "$0")" && pwd)
out=$(cd "$(dirname "$airlock")" && pwd)/demo
# --output-dir wants a folder that does not exist or is empty.
rm -rf "$out"

echo "\$ airlock run --workspace examples/sales --output-dir $out examples/analyze.py"
"$airlock" run --workspace "$here/sales" --output-dir "$out" "$here/analyze.py"
echo
echo "files written by the guest to /output, returned to $out:"
ls -l "$out"
echo
echo "--- summary.csv"
cat "$out/summary.csv"
echo
echo "the chart, drawn by matplotlib in the sandbox: $out/chart.png"
echo
echo "\$ airlock run --json -c '...'   (the result JSON an agent receives)"
"$airlock" run --json --workspace "$here/sales" \
    -c 'import os; print(os.listdir("/input")); open("/output/hello.txt", "w").write("hi\n")'
