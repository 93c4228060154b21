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
# shellcheck source=bench/build_c.sh
. bench/build_c.sh
bench_build bench_tools
"$build/bench_tools" "$runs"
