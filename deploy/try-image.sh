#!/usr/bin/env bash
# Tries deploy/Containerfile and the pod settings of deploy/k8s without a
# container runtime: the image's two stages are run as chroots of a Debian 12
# minbase tree (debootstrap, close to debian:12-slim), then the runtime tree
# serves a call as the pod would run it: in a user namespace of 65,536 ids
# (hostUsers: false), with a fresh procfs (procMount: Unmasked), no seccomp
# or AppArmor profile, as uid 10001. Then the same with the runtime's /proc
# masks added, which must fail as deploy/k8s/README.md says.
# Needs root, debootstrap, uidmap (newuidmap) and Debian's mirror; a few
# minutes. Not part of make check.
#   usage: deploy/try-image.sh [WORKDIR]     (default: a new temporary folder)
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "try-image.sh: run as root" >&2; exit 2; }
for tool in debootstrap newuidmap unshare curl; do
    command -v $tool >/dev/null || { echo "try-image.sh: needs $tool (apt-get install debootstrap uidmap curl)" >&2; exit 2; }
done
work=${1:-$(mktemp -d /tmp/airlock-try-image-XXXXXX)}
mkdir -p "$work"
base=$work/base
if [ ! -x "$base/bin/bash" ]; then
    echo "== debootstrap bookworm (minbase) into $base"
    debootstrap --variant=minbase bookworm "$base" http://deb.debian.org/debian >"$work/debootstrap.log"
fi

# One stage: a copy of the base tree, the command run in it by chroot, in a
# mount namespace of its own so that nothing stays mounted.
stage() { # tree command
    local tree=$1; shift
    unshare -m --propagation private bash -c '
        set -e
        mount -t proc proc "$1/proc"
        mount --rbind /dev "$1/dev"
        cp /etc/resolv.conf "$1/etc/resolv.conf" 2>/dev/null || true
        tree=$1; shift
        chroot "$tree" /bin/bash -c "$*"' _ "$tree" "$@"
}

if [ "${TRY_IMAGE_REUSE:-}" = 1 ] && [ -x "$work/runtime/usr/local/bin/airlock" ]; then
    echo "== reusing $work/runtime (TRY_IMAGE_REUSE=1)"
else
echo "== build stage (as the Containerfile: scripts/deps.sh build, make, make install)"
rm -rf "$work/build"
cp -a "$base" "$work/build"
mkdir -p "$work/build/src"
git archive HEAD | tar -x -C "$work/build/src"
sed -n '/^FROM debian:12-slim AS build/,/^FROM debian:12-slim$/p' deploy/Containerfile |
    grep -q 'scripts/deps.sh build' || { echo "try-image.sh: the Containerfile's build stage changed; update this script" >&2; exit 1; }
stage "$work/build" 'cd /src && rm -rf build bench/node_modules tests/mcp/node_modules &&
    bash scripts/deps.sh build && make -j"$(nproc)" >/dev/null && make install DESTDIR=/staging PREFIX=/usr/local >/dev/null'

echo "== runtime stage (the Containerfile's package list, the installed files, the user)"
pkgs=$(sed -n '/^FROM debian:12-slim$/,$p' deploy/Containerfile |
    sed -n '/apt-get install/,/rm -rf/p' | grep -v 'apt-get\|rm -rf' | tr -d '\\' | xargs)
rm -rf "$work/runtime"
cp -a "$base" "$work/runtime"
stage "$work/runtime" "apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $pkgs >/dev/null"
cp -a "$work/build/staging/usr/local/." "$work/runtime/usr/local/"
stage "$work/runtime" 'ldconfig && groupadd --gid 10001 airlock && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin airlock'
echo "image: $(du -sh "$work/runtime" | cut -f1) (an uncompressed tree, apt lists included)"
fi

token=$(head -c 24 /dev/urandom | base64 | tr -d '/+=')
mkdir -p "$work/runtime/etc/airlock"
echo "$token" >"$work/runtime/etc/airlock/tokens"
chmod 0400 "$work/runtime/etc/airlock/tokens"
# The pod: ids 0..65535 inside are 100000.. outside (root may map them).
grep -q '^root:100000:65536' /etc/subuid || echo root:100000:65536 >>/etc/subuid
grep -q '^root:100000:65536' /etc/subgid || echo root:100000:65536 >>/etc/subgid
chown -R 100000:100000 "$work/runtime/tmp"
# uid 10001 of the pod is 110001 outside.
chown 110001:110001 "$work/runtime/etc/airlock/tokens"

mkdir -p "$work/runtime/.oldroot"
port=$((20000 + RANDOM % 20000))
pod() { # masks...  (runs airlock serve in the pod, calls it once, stops it)
    local masks=$1
    timeout 120 unshare -U --map-users=100000,0,65536 --map-groups=100000,0,65536 -S 0 -G 0 \
        -m -p -f --propagation private bash -c '
        set -e
        root=$1 port=$2 masks=$3
        mount --rbind "$root" "$root"
        mount -t proc proc "$root/proc"
        mount --rbind /dev "$root/dev"
        mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
        eval "$masks"
        # pivot_root as a runtime does, not chroot: the kernel refuses a new
        # user namespace to a process in a chroot.
        cd "$root"
        pivot_root . .oldroot
        cd /
        exec /bin/sh -c "umount -l /.oldroot && exec setpriv --reuid 10001 --regid 10001 --clear-groups \
            env -i PATH=/usr/bin:/bin TMPDIR=/tmp HOME=/tmp \
            /usr/local/bin/airlock serve --listen 127.0.0.1:$port --tokens /etc/airlock/tokens --instance pod1"' \
        _ "$work/runtime" "$port" "$masks" >"$work/serve.log" 2>&1 &
    local pid=$!
    for _ in $(seq 100); do
        curl -s -o /dev/null "http://127.0.0.1:$port/healthz" && break
        sleep 0.2
    done
    curl -s -m 60 -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
        -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2026-07-28' \
        -d '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute_code","arguments":{"code":"import os, numpy\nprint(os.getuid(), numpy.arange(3).sum())"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"try-image","version":"1"}}}}' \
        "http://127.0.0.1:$port/mcp" || true
    echo
    kill -TERM $pid 2>/dev/null || true
    wait $pid 2>/dev/null || true
}
echo "== the pod as deploy/k8s/deployment.yaml asks (expect: 0 3)"
pod ':'
echo "== with the runtime's default /proc masks (expect: cannot mount /proc)"
pod 'mount --bind /dev/null "$root/proc/keys"; mount -t tmpfs -o ro tmpfs "$root/proc/acpi"'
echo "== with /proc/sys read-only (expect: Read-only file system)"
pod 'mount --bind "$root/proc/sys" "$root/proc/sys"; mount -o remount,bind,ro "$root/proc/sys"'
