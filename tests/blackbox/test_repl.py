"""airlock repl: cells read from standard input run in one session."""
from harness import airlock, run


def test_cells_share_state_and_failures_roll_back():
    cells = ("x = 1\n"
             "def f(a):\n    return a + x\n\n"
             "f(41)\n"
             "x = 5; raise ValueError('v')\n"
             "x\n"
             "import time\nx = 7; time.sleep(60)\n"
             "print(x)\n")
    p = airlock("repl", "--timeout", "2", input=cells)
    assert p.returncode == 0, p
    assert p.stdout == "42\n1\n1\n", p
    assert p.stderr.count("state rolled back") == 2 and "ValueError: v" in p.stderr, p.stderr
    assert "timeout" in p.stderr, p.stderr


def test_fork_and_use():
    cells = ("x = [1]\n"
             ":fork\n"
             "x.append(2); x\n"
             ":use 0\n"
             "x\n"
             ":use 1\n"
             "x\n"
             ":nothing\n")
    p = airlock("repl", input=cells)
    assert p.returncode == 0, p
    assert p.stdout == "[1, 2]\n[1]\n[1, 2]\n", p
    assert "[session 1: a fork of session 0]" in p.stderr, p.stderr
    assert ":fork, :use N" in p.stderr, p.stderr


if __name__ == "__main__":
    run()
