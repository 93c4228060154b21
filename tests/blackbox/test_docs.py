"""The documents against the tree: the folder map of docs/internals.md names
every folder of the repository and nothing that is not there, the README
stays a README, and every link between the documents leads somewhere."""
import os
import re
import subprocess

from harness import run

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def tracked_folders():
    """Top-level folders, and the folders under src/, src/lib/ and tests/."""
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    out = set()
    for f in files:
        parts = f.split("/")[:-1]
        if not parts:
            continue
        out.add(parts[0] + "/")
        if parts[0] == "src" and len(parts) > 1:
            out.add("/".join(parts[:2]) + "/")
            if parts[1] == "lib" and len(parts) > 2:
                out.add("/".join(parts[:3]) + "/")
    return out


def mapped_folders():
    with open(os.path.join(ROOT, "docs", "internals.md")) as f:
        text = f.read()
    return set(re.findall(r"^\| `([^`]+/)` \|", text, re.M))


def test_the_folder_map_is_the_tree():
    tree, mapped = tracked_folders(), mapped_folders()
    # src/ and src/lib/ are the rooms' parents, not rooms.
    missing = tree - mapped - {"src/", "src/lib/"}
    assert not missing, f"folders docs/internals.md does not map: {sorted(missing)}"
    gone = {m for m in mapped if not os.path.isdir(os.path.join(ROOT, m))}
    assert not gone, f"folders docs/internals.md maps that do not exist: {sorted(gone)}"


def test_the_readme_is_short_and_opens_with_the_two_commands():
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    assert len(text.splitlines()) < 300
    head = text[:3000]
    assert "make demo" in head and "make check" in head


def test_links_between_documents_lead_somewhere():
    docs = [os.path.join(ROOT, d) for d in ("README.md", "CONTRIBUTING.md", "SECURITY.md")]
    docs += [os.path.join(ROOT, "docs", f) for f in os.listdir(os.path.join(ROOT, "docs"))
             if f.endswith(".md")]
    bad = []
    for d in docs:
        with open(d) as f:
            for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", f.read()):
                if not os.path.exists(os.path.join(os.path.dirname(d), target)):
                    bad.append((os.path.relpath(d, ROOT), target))
    assert not bad, bad


if __name__ == "__main__":
    run()
