"""An MCP server frozen at protocol 2024-11-05: raw JSON lines, no SDK.

It answers initialize with 2024-11-05 whatever the client asks, knows only
tools/list (paginated: one tool per page) and tools/call, and refuses any
other method, as servers of that era do.
"""

import json
import sys

TOOLS = [
    {"name": "old_add", "description": "Adds two integers the old way",
     "inputSchema": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}},
    {"name": "old_upper", "description": "Upper-cases a string",
     "inputSchema": {"type": "object", "properties": {"s": {"type": "string"}}, "required": ["s"]}},
]


def reply(msg_id, result=None, error=None):
    out = {"jsonrpc": "2.0", "id": msg_id}
    if error:
        out["error"] = error
    else:
        out["result"] = result
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    msg = json.loads(line)
    method, msg_id = msg.get("method"), msg.get("id")
    if msg_id is None:
        continue
    if method == "initialize":
        reply(msg_id, {"protocolVersion": "2024-11-05", "capabilities": {"tools": {}},
                       "serverInfo": {"name": "old", "version": "0.1"}})
    elif method == "tools/list":
        cursor = int((msg.get("params") or {}).get("cursor") or 0)
        page = {"tools": TOOLS[cursor:cursor + 1]}
        if cursor + 1 < len(TOOLS):
            page["nextCursor"] = str(cursor + 1)
        reply(msg_id, page)
    elif method == "tools/call":
        args = msg["params"].get("arguments", {})
        if msg["params"]["name"] == "old_add":
            text = str(args["a"] + args["b"])
        else:
            text = args["s"].upper()
        reply(msg_id, {"content": [{"type": "text", "text": text}]})
    else:
        reply(msg_id, error={"code": -32601, "message": f"Method not found: {method}"})
