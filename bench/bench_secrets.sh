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
# shellcheck source=bench/build_c.sh
. bench/build_c.sh
bench_build bench_secrets
"$build/bench_secrets" "$runs"
