#!/usr/bin/env python3
"""The length check: no function of src/ longer than LIMIT lines (from the
line that names it to its closing brace), but those listed in KNOWN, each
still to be split (issue 39). A function listed that has come under the
limit is named, so that its line can go.

Usage: scripts/funclen.py   (from anywhere; reads the tree beside it)
"""
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
LIMIT = 120
# file: function names, over the limit today.
KNOWN = {}


def functions(path):
    """(name, lines) of each function defined in path: a body opens with
    '{' alone in column 0 and closes with '}' alone in column 0."""
    lines = open(path, encoding="utf-8", errors="replace").read().split("\n")
    start = None
    for i, line in enumerate(lines):
        if line == "{" and start is None:
            j = i - 1
            while j > 0 and lines[j] and not re.match(r"[A-Za-z_]", lines[j]):
                j -= 1
            m = re.search(r"(\w+)\s*\(", lines[j])
            start = (j, m.group(1) if m else lines[j])
        elif line == "}" and start is not None:
            yield start[1], i - start[0] + 1
            start = None


def main():
    bad, stale = [], []
    for d, _, files in os.walk(os.path.join(ROOT, "src")):
        for f in sorted(files):
            if not f.endswith(".c"):
                continue
            rel = os.path.relpath(os.path.join(d, f), ROOT)
            known = KNOWN.get(rel, set())
            seen = set()
            for name, n in functions(os.path.join(d, f)):
                if n > LIMIT:
                    seen.add(name)
                    if name not in known:
                        bad.append(f"{rel}: {name} is {n} lines (more than {LIMIT}): split it")
            for name in sorted(known - seen):
                stale.append(f"{rel}: {name} is no longer over {LIMIT} lines: take it off "
                             "scripts/funclen.py's KNOWN list")
    for b in bad + stale:
        print(f"funclen: {b}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
