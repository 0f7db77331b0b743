"""A fault-injection MCP server: it reads requests and never answers.

With HANG_PIDFILE set, it writes its pid there first. With HANG_AFTER_INITIALIZE set, it answers
the handshake and nothing after it (a server whose tools/list never returns).
"""

import json
import os
import sys
import time

if os.environ.get("HANG_PIDFILE"):
    with open(os.environ["HANG_PIDFILE"], "w") as f:
        f.write(str(os.getpid()))
for line in sys.stdin:
    message = json.loads(line) if line.strip() else {}
    if os.environ.get("HANG_AFTER_INITIALIZE") and message.get("method") == "initialize":
        result = {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "hang", "version": "1"}}
        print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)
        continue
    if "id" in message:
        time.sleep(3600)
