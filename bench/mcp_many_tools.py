"""A stdio MCP server of N tools (its first argument), each with the same
input schema of five parameters (a string, an integer, an enum, an array
and a nested object), for the cost of code mode's stubs (bench_stubs.c,
bench_servers.mjs). Every call answers with no content."""
import json
import sys

n = int(sys.argv[1])
props = {"name": {"type": "string", "description": "A name."},
         "count": {"type": "integer"}, "mode": {"type": "string", "enum": ["a", "b", "c"]},
         "tags": {"type": "array", "items": {"type": "string"}},
         "filter": {"type": "object", "properties": {"field": {"type": "string"},
                                                     "value": {"type": "number"}}}}
tools = [{"name": f"tool-{i}", "description": f"Tool number {i}: does thing {i}.",
          "inputSchema": {"type": "object", "properties": props, "required": ["name"]},
          "annotations": {"readOnlyHint": True}} for i in range(n)]
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m:
        continue
    if m["method"] == "initialize":
        r = {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}},
             "serverInfo": {"name": "many", "version": "1"}}
    elif m["method"] == "tools/list":
        r = {"tools": tools}
    else:
        r = {"content": []}
    print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r}), flush=True)
