#!/usr/bin/env bash
# The scrub's cost per MiB of text: builds bench/bench_scrub.c against the
# library and prints the medians (ms per MiB).
# usage: bench/bench_scrub.sh [BUILD_DIR] [RUNS]
set -euo pipefail
build=${1:-build}
runs=${2:-15}
cd "$(dirname "$0")/.."
# shellcheck source=bench/build_c.sh
. bench/build_c.sh
bench_build bench_scrub
"$build/bench_scrub" "$runs"
