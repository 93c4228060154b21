"""airlock repl: cells read from standard input run in one session."""
import os
import pty
import select
import time

from harness import AIRLOCK, airlock, run


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


def test_exit_and_quit_leave():
    for cell, status in (("exit()", 0), ("quit()", 0), ("quit(3)", 3), ("exit", 0)):
        p = airlock("repl", input=f"x = 1\n{cell}\nprint('still here')\n")
        assert p.returncode == status, (cell, p)
        assert "still here" not in p.stdout, (cell, p.stdout)
    # Among other code, exit() ends the cell, not the REPL.
    p = airlock("repl", input="if False: exit()\nprint('still here')\n")
    assert p.returncode == 0 and p.stdout == "still here\n", p


def read_until(fd, text, out):
    """Reads the terminal until text has come (a generous bound, not a
    timing: the test fails only when it never comes)."""
    end = time.monotonic() + 120
    while text not in out[0]:
        assert time.monotonic() < end, out[0]
        if select.select([fd], [], [], 1)[0]:
            try:
                out[0] += os.read(fd, 4096).decode()
            except OSError:
                break
    return out[0]


def test_block_ended_by_ctrl_d_prints_its_output_on_a_line_of_its_own():
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(AIRLOCK, [AIRLOCK, "repl"])
    out = [""]
    try:
        read_until(fd, ">>> ", out)
        os.write(fd, b"for i in range(1):\r")
        read_until(fd, "... ", out)
        os.write(fd, b"    print(i + 40)\r")
        read_until(fd, "40)\r\n... ", out)
        os.write(fd, b"\x04")
        text = read_until(fd, "40\r\n", out)
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(fd)
    assert "... 40" not in text, text


if __name__ == "__main__":
    run()
