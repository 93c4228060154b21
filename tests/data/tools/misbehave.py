#!/usr/bin/env python3
"""A command tool that misbehaves in the way argv[1] names, for the tests."""
import os
import signal
import sys
import time

mode = sys.argv[1]
if mode != "noread":
    sys.stdin.read()
if mode == "crash":
    os.kill(os.getpid(), signal.SIGSEGV)
elif mode == "hang":
    time.sleep(3600)
elif mode == "garbage":
    print("this is not JSON")
elif mode == "two":
    print("1 2")
elif mode == "empty":
    pass
elif mode == "huge":
    chunk = b"7" * (1 << 20)
    for _ in range(100):
        sys.stdout.buffer.write(chunk)
elif mode == "fail":
    sys.stderr.write("Traceback (most recent call last):\nValueError: the widget is broken\n")
    sys.exit(3)
elif mode == "silentfail":
    sys.exit(4)
elif mode == "noread":
    print('"fine"')
elif mode == "daemon":
    # A grandchild keeps stdout open long after the tool itself is done.
    if os.fork() == 0:
        time.sleep(3600)
        os._exit(0)
    print('{"ok": true}')
elif mode == "escape":
    # A grandchild leaves the tool's process group and keeps stdout open.
    if os.fork() == 0:
        os.setsid()
        time.sleep(10)
        os._exit(0)
    print('{"escaped": true}')
elif mode == "stderrflood":
    sys.stderr.write("x" * (10 << 20))
    print("[1]")
