#!/usr/bin/env python3
"""A sample command tool: reads its arguments as JSON on stdin and prints the
result as one JSON value. Exit status non-zero with a message on stderr is a
failure."""
import json
import sys

args = json.load(sys.stdin)
op, a, b = args["operation"], args["a"], args["b"]
if op == "add":
    result = a + b
elif op == "subtract":
    result = a - b
elif op == "multiply":
    result = a * b
elif op == "divide":
    if b == 0:
        sys.stderr.write("division by zero\n")
        sys.exit(1)
    result = a / b
else:
    sys.stderr.write(f"unknown operation {op!r}\n")
    sys.exit(2)
json.dump({"result": result}, sys.stdout)
