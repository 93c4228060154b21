#!/usr/bin/env python3
"""The layering check: the folders of src/ (and include/) as nodes, an edge
from A to B when a file of A includes a header of B or an object of A calls
or uses a symbol defined in B. Prints the edges that go against the layer
order written in docs/internals.md ("Layers") and the loops across folders,
and fails when either count passes what that section allows. It also names
the shared symbols of src/mcp and src/mcp/http without their room's prefix
(CONTRIBUTING.md, "Names say their room"), and fails on any.

The command line, the MCP server and its transports, and the Jupyter kernel
(src/cli, src/mcp, src/mcp/http, src/kernel) are built on the public API alone: a public symbol
they use counts as an edge to include/,
whichever folder of the library defines it.

Usage: scripts/layers.py BUILD_DIR   (the objects of `make` in BUILD_DIR)
"""
import collections
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
DOC = os.path.join(ROOT, "docs", "internals.md")
# Where a quoted include is looked for after the including file's folder,
# as the Makefile's -I flags have it.
LIB_PATHS = ["include", "src/common", "src/lib"]
CLI_PATHS = ["include", "src/common", "src/cli", "src/mcp", "src/kernel"]
PUBLIC_ONLY = {"src/cli", "src/mcp", "src/mcp/http", "src/kernel"}


def read_order():
    """The layer order (ground first) and the allowances, from internals.md."""
    text = open(DOC, encoding="utf-8").read()
    m = re.search(r"^## Layers\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    if not m:
        sys.exit(f"layers: {DOC} has no '## Layers' section")
    section = m.group(1)
    order = re.findall(r"^\d+\. `([^`]+?)/?`", section, re.M)
    allow = re.search(r"allows (\d+) edges? against the order and (\d+) loops?", section)
    if not order or not allow:
        sys.exit("layers: the Layers section needs a numbered list of `folder` items and a "
                 "line 'allows N edges against the order and M loops'")
    return order, int(allow.group(1)), int(allow.group(2))


def folders_of_tree():
    found = ["include"]
    for d, subdirs, files in os.walk(os.path.join(ROOT, "src")):
        rel = os.path.relpath(d, ROOT)
        if any(f.endswith((".c", ".h")) for f in files):
            found.append(rel)
    return found


def include_edges(folders, edges):
    inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
    for f in folders:
        paths = [f] + (CLI_PATHS if f in PUBLIC_ONLY else LIB_PATHS)
        for name in sorted(os.listdir(os.path.join(ROOT, f))):
            if not name.endswith((".c", ".h")):
                continue
            src = f"{f}/{name}"
            with open(os.path.join(ROOT, src), encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    m = inc.match(line)
                    if not m:
                        continue
                    for d in paths:
                        target = os.path.normpath(os.path.join(d, m.group(1)))
                        if os.path.exists(os.path.join(ROOT, target)):
                            g = os.path.dirname(target)
                            if g != f and g in folders:
                                edges[(f, g)].append(f"{src} includes {target}")
                            break


def public_symbols():
    names = set()
    for h in os.listdir(os.path.join(ROOT, "include")):
        if h.endswith(".h"):
            text = open(os.path.join(ROOT, "include", h), encoding="utf-8").read()
            names.update(re.findall(r"\b(airlock_\w+)\s*\(", text))
    return names


def objects_of(build, folder):
    """The objects of one folder whose source is still in the tree: an
    incremental build keeps the object of a file that moved away, which
    would report edges that no longer exist."""
    od = os.path.join(build, folder)
    if not os.path.isdir(od):
        return []
    return [os.path.join(od, n) for n in sorted(os.listdir(od))
            if n.endswith(".o") and os.path.exists(os.path.join(ROOT, folder, n[:-2] + ".c"))]


def symbol_edges(folders, build, edges):
    objects = []
    for f in folders:
        objects += [(f, path) for path in objects_of(build, f)]
    folder_of = {path: f for f, path in objects}
    # One nm for every object: -A prefixes each line with its file.
    out = subprocess.run(["nm", "-A"] + [path for _, path in objects], capture_output=True,
                         text=True, check=True).stdout
    defined, used = {}, []
    for line in out.splitlines():
        path, _, rest = line.partition(":")
        f = folder_of.get(path)
        p = rest.split()
        if f is None:
            continue
        if len(p) == 2 and p[0] == "U":
            src = os.path.relpath(path, build)[:-2] + ".c"
            used.append((f, src, p[1]))
        elif len(p) == 3 and p[1] in "TDBRVW":
            defined.setdefault(p[2], f)
    public = public_symbols()
    for f, src, sym in used:
        g = defined.get(sym)
        if g is None or g == f:
            continue
        if f in PUBLIC_ONLY and sym in public:
            g = "include"
        if g != f:
            edges[(f, g)].append(f"{src} uses {sym}")


# The prefixes of shared names in src/mcp (CONTRIBUTING.md, "Names say their
# room"): a symbol an object of these folders defines for other files starts
# with one of them. MHD_ are libmicrohttpd's own names (mhd.c opens it).
ROOM_PREFIXES = {
    "src/mcp": ("mcp_", "tenant_", "tenants_", "quota_", "audit_", "sha256_"),
    "src/mcp/http": ("http_", "mcp_service_run_http", "MHD_"),
}


def unprefixed(build):
    """The shared names of ROOM_PREFIXES' folders without their prefix."""
    bad = []
    for f, prefixes in ROOM_PREFIXES.items():
        objs = objects_of(build, f)
        if not objs:
            continue
        out = subprocess.run(["nm", "-A", "--defined-only", "--extern-only"] + objs,
                             capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            path, _, rest = line.partition(":")
            p = rest.split()
            if len(p) == 3 and not p[2].startswith(prefixes):
                bad.append(f"{os.path.relpath(path, build)[:-2]}.c: {p[2]}")
    return bad


def loops(nodes, edges):
    """Strongly connected components of more than one folder (Tarjan)."""
    succ = collections.defaultdict(set)
    for a, b in edges:
        succ[a].add(b)
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(succ[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    build = os.path.abspath(sys.argv[1])
    if not os.path.isdir(os.path.join(build, "src")):
        sys.exit(f"layers: {build} holds no objects: run make first")
    order, allow_edges, allow_loops = read_order()
    folders = folders_of_tree()
    missing = [f for f in folders if f not in order]
    if missing:
        sys.exit(f"layers: folders not in the order of docs/internals.md: {', '.join(missing)}")
    edges = collections.defaultdict(list)
    include_edges(folders, edges)
    symbol_edges(folders, build, edges)
    rank = {f: i for i, f in enumerate(order)}
    against = sorted((a, b) for a, b in edges if rank[a] < rank[b])
    for a, b in against:
        why = edges[(a, b)]
        print(f"against the order: {a} -> {b} ({len(why)}: {why[0]}"
              + (", ..." if len(why) > 1 else "") + ")")
    cycles = loops(folders, edges)
    for c in cycles:
        print(f"loop: {' <-> '.join(c)}")
    names = unprefixed(build)
    for n in names:
        print(f"layers: a shared name without its room's prefix: {n}")
    print(f"layers: {len(folders)} folders, {len(edges)} edges, {len(against)} against the order "
          f"(allowed {allow_edges}), {len(cycles)} loops (allowed {allow_loops})")
    if names:
        print("layers: give each name above its room's prefix (CONTRIBUTING.md, 'Names say "
              "their room'), or make it static", file=sys.stderr)
        return 1
    if len(against) > allow_edges or len(cycles) > allow_loops:
        print("layers: more than docs/internals.md's Layers section allows: fix the new edge, "
              "or argue for it there", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
