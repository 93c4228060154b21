"""The command line's one option table (src/cli/option_table.h) as every
reader gets it: each command's --help, the parser, the refusal of another
command's option, docs/options.md, the man page and the bash completion must all
say the same."""
import os
import re
import shutil
import subprocess

from harness import AIRLOCK, airlock, run

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
COMMANDS = ["run", "mcp", "serve", "describe", "repl", "kernel"]


def table():
    """{option: set of commands} from `airlock help --markdown`."""
    p = airlock("help", "--markdown")
    assert p.returncode == 0, p.stderr
    opts = {}
    for line in p.stdout.splitlines():
        m = re.match(r"\| `(?:-\w, )?(--[a-z-]+|-\w)[^`]*` \| ([^|]*) \|", line)
        if m:
            cmds = m.group(2).strip()
            opts[m.group(1)] = set(COMMANDS) if cmds == "all" else set(cmds.split(", "))
    return opts


def test_docs_options_md_is_the_table():
    with open(os.path.join(ROOT, "docs", "options.md")) as f:
        committed = f.read()
    assert airlock("help", "--markdown").stdout == committed, \
        "docs/options.md is out of date: make docs"


def test_each_help_lists_exactly_its_options():
    opts = table()
    assert len(opts) > 30, opts
    for cmd in COMMANDS:
        p = airlock(cmd, "--help")
        assert p.returncode == 0, (cmd, p.stderr)
        listed = set(re.findall(r"^\s+(?:-\w, )?(--[a-z-]+)", p.stdout, re.M))
        want = {o for o, cmds in opts.items() if cmd in cmds and o.startswith("--")}
        assert listed == want, (cmd, listed ^ want)


def test_another_commands_option_is_refused_naming_who_takes_it():
    opts = table()
    for cmd in COMMANDS:
        for opt, cmds in opts.items():
            if cmd in cmds:
                continue
            p = airlock(cmd, opt, "x", input="", timeout=60)
            assert p.returncode == 2, (cmd, opt, p.returncode, p.stderr)
            lines = p.stderr.strip().splitlines()
            assert len(lines) == 1, (cmd, opt, p.stderr)
            assert f"{opt} is not an option of airlock {cmd}" in lines[0], (cmd, opt, lines)
            assert f"airlock {cmd} --help" in lines[0], lines
            for c in cmds:
                assert c in lines[0], (cmd, opt, lines)


def test_unknown_option_and_missing_value_point_at_help():
    p = airlock("run", "--no-such-option")
    assert p.returncode == 2 and "unknown option '--no-such-option'" in p.stderr, p.stderr
    assert "airlock run --help" in p.stderr
    p = airlock("serve", "--listen")
    assert p.returncode == 2 and "--listen needs a value" in p.stderr, p.stderr


def test_code_has_a_long_name():
    p = airlock("run", "--code", "print(6 * 7)")
    assert p.returncode == 0 and p.stdout == "42\n", (p.stdout, p.stderr)


def test_man_page_and_completion_name_every_option():
    opts = table()
    man = airlock("help", "--man").stdout
    assert man.startswith(".TH AIRLOCK 1"), man[:80]
    for o in opts:
        assert o.replace("-", "\\-") in man, o
    if shutil.which("groff"):
        p = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z"], input=man,
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and p.stderr == "", p.stderr
    bash = airlock("help", "--bash").stdout
    p = subprocess.run(["bash", "-n"], input=bash, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    for o in opts:
        if o.startswith("--"):
            assert o + " " in bash, o
    # The completion completes: run's options after "airlock run --ti".
    script = bash + "\nCOMP_WORDS=(airlock run --ti); COMP_CWORD=2; _airlock; echo ${COMPREPLY[@]}\n"
    p = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert p.stdout.split() == ["--timeout"], p.stdout


def test_each_options_paragraph_is_written_once_and_reaches_the_man_page():
    """An option's paragraph lives with its row of the table: docs/options.md
    and the man page have it, and docs/design.md does not repeat it."""
    md = airlock("help", "--markdown").stdout
    assert "\n## What each option does\n" in md, md[-300:]
    paragraphs = re.findall(r"^### `([^`]+)`\n\n(.+)$", md, re.M)
    assert len(paragraphs) > 20, paragraphs
    names = {re.search(r"--[a-z-]+", left).group(0) for left, _ in paragraphs}
    for opt in ("--output-dir", "--tokens", "--secret", "--servers", "--audit"):
        assert opt in names, (opt, names)
    man = airlock("help", "--man").stdout
    with open(os.path.join(ROOT, "docs", "design.md")) as f:
        design = f.read()
    for left, text in paragraphs:
        plain = text.replace("`", "").replace("-", "\\-")
        assert plain in man, (left, plain[:80])
        # One source: the paragraph's longest sentence is nowhere in design.md.
        sentence = max(re.split(r"(?<=[.;:]) ", text), key=len)
        assert sentence not in design, (left, sentence)


def test_help_of_airlock_itself():
    p = airlock("--help")
    assert p.returncode == 0
    for cmd in COMMANDS:
        assert f"\n  {cmd} " in p.stdout, p.stdout
    p = airlock("help", "--nope")
    assert p.returncode == 2 and "--man" in p.stderr


if __name__ == "__main__":
    run()
