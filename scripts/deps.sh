#!/usr/bin/env bash
# Installs the Debian 12 packages airlock needs to build and test, so that
# `make demo` and `make check` work on a fresh machine. It is idempotent and
# quiet when everything is already present.
#
# With --verify it installs nothing: it names what is missing and exits 1.
# Plain `make` and the test binaries' rules call it that way, so that only the
# targets that promise to install (deps, demo, check, check-unit, bench, soak,
# fuzz) ever run apt-get.
#
# Usage: scripts/deps.sh [--verify] [build|demo|check|bench|fuzz]
set -euo pipefail

verify=0
if [ "${1:-}" = --verify ]; then
    verify=1
    shift
fi
profile=${1:-build}

build_pkgs=(build-essential pkg-config libseccomp-dev libjansson-dev
            libcurl4-openssl-dev libpython3-dev python3 media-types
            libmicrohttpd-dev libzmq3-dev)
# The guest's scientific stack, as Debian packages it: the demo draws its
# chart with pandas and matplotlib.
demo_pkgs=(python3-numpy python3-pandas python3-matplotlib)
# The tests run the whole stack in the guest, fontconfig's tools included,
# and BLAS both as Debian's default netlib build and as OpenBLAS with its
# thread pool (tests/blackbox/test_guest_python.py switches between them).
# Installing libopenblas0-pthread makes OpenBLAS the machine's default.
# HAProxy: tests/blackbox/test_multi_instance.py and bench/bench_serve.py run
# airlock serve instances behind deploy/haproxy.cfg; the same test reads the
# Kubernetes manifests (as text).
check_pkgs=(libcmocka-dev clang-format nodejs iproute2 "${demo_pkgs[@]}" python3-scipy
            python3-pil fontconfig libblas3 liblapack3 libopenblas0-pthread curl
            haproxy)
# The Python package: its extension's headers and build (make python), its tests.
check_pkgs+=(python3-dev python3-setuptools python3-pytest)
# The ABI check of libairlock.so against abi/libairlock.abi (tests/build/test_abi.sh).
check_pkgs+=(abigail-tools)
# CPython's own tests, run inside the guest (tests/cpython, the cpython tier).
check_pkgs+=(libpython3.11-testsuite)
# The guest's /proc as psutil reads it: tests/blackbox/test_guest_env.py.
check_pkgs+=(python3-psutil)
# The multihost tier (tests/multihost): a GlusterFS replicated volume of the
# test's own (glusterd, its bricks) FUSE-mounted once per host
# (glusterfs-client: the glusterfs FUSE client), as a shared --tenants-dir.
check_pkgs+=(glusterfs-server glusterfs-client)
# systemd-analyze verifies deploy/airlock.service (test_multi_instance.py).
check_pkgs+=(systemd)
# The Jupyter kernel (airlock kernel) driven by Jupyter's own clients: the
# conformance suite, nbclient and nbconvert running a notebook, and a real
# browser on the Notebook server (tests/blackbox/test_kernel.py).
check_pkgs+=(python3-jupyter-client jupyter-client python3-jupyter-kernel-test python3-nbclient
             python3-nbconvert jupyter-nbconvert jupyter-notebook chromium chromium-driver
             python3-selenium)
# linux-perf: where a copy's preparation spends its time (docs/performance.md).
bench_pkgs=(bubblewrap firejail gnutls-bin runsc socat ripgrep python3-ipykernel python3-jupyter-client
            linux-perf)
fuzz_pkgs=(clang libclang-rt-14-dev)

pkgs=("${build_pkgs[@]}")
case "$profile" in
build) ;;
demo) pkgs+=("${demo_pkgs[@]}") ;;
check) pkgs+=("${check_pkgs[@]}") ;;
bench) pkgs+=("${check_pkgs[@]}" "${bench_pkgs[@]}") ;;
fuzz) pkgs+=("${check_pkgs[@]}" "${fuzz_pkgs[@]}") ;;
*) echo "deps.sh: unknown profile '$profile' (build, demo, check, bench or fuzz)" >&2; exit 2 ;;
esac

missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
# npm ships inside some builds of the nodejs package; ask for Debian's npm
# package only when the command itself is missing.
if [ "$profile" != build ] && [ "$profile" != demo ] && ! command -v npm >/dev/null 2>&1; then
    missing+=(npm)
fi
[ ${#missing[@]} -eq 0 ] && exit 0

if [ $verify -eq 1 ]; then
    # One line the reader can act on, whatever make prints after it.
    echo "airlock: missing Debian package(s) ${missing[*]}: run 'make deps' (as root), or apt-get install -y ${missing[*]}" >&2
    exit 1
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "airlock needs these Debian packages: ${missing[*]}" >&2
    echo "run as root: apt-get update && apt-get install -y ${missing[*]}" >&2
    exit 1
fi

echo "deps.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# A fresh machine has no package lists yet; refresh them once if the install fails.
if ! apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
    apt-get update >/dev/null
    apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null
fi
