"""Capture the tool lists of the held-out servers: MCP servers that no constant of the search was
chosen on, to see whether what the evaluation asserts holds for servers it never saw.

    npm install --prefix /tmp/held-out @notionhq/notion-mcp-server@2.5.2 mcp-server-kubernetes@4.1.7
    /usr/bin/python3 crates/catalog/tests/search_eval/held_out/capture.py /tmp/held-out

Each server is started over stdio, sent `initialize` and `tools/list` (following `nextCursor`), and
written to servers/<name>.json as {"server", "server_info", "instructions", "tools"}, the format of
../servers/. Neither server needs its service to list its tools: Notion's gets a placeholder token,
Kubernetes' no cluster. Standard library only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "servers"
SERVERS = {
    "notion": ("notion-mcp-server", {"NOTION_TOKEN": "ntn_placeholder"}),
    "kubernetes": ("mcp-server-kubernetes", {}),
}


def capture(name: str, command: str, env: dict) -> dict:
    proc = subprocess.Popen([command], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env={**os.environ, **env})

    def send(message: dict) -> None:
        proc.stdin.write(json.dumps(message) + "\n")
        proc.stdin.flush()

    def reply(request_id: int) -> dict:
        for line in proc.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue  # a log line on stdout
            if message.get("id") == request_id:
                if "error" in message:
                    raise SystemExit(f"{name}: {message['error']}")
                return message["result"]
        raise SystemExit(f"{name}: exited before answering request {request_id}")

    try:
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "capture", "version": "1"}}})
        init = reply(1)
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        tools, cursor, request_id = [], None, 2
        while True:
            send({"jsonrpc": "2.0", "id": request_id, "method": "tools/list",
                  "params": {"cursor": cursor} if cursor else {}})
            page = reply(request_id)
            tools += page["tools"]
            cursor, request_id = page.get("nextCursor"), request_id + 1
            if not cursor:
                break
    finally:
        proc.kill()
    return {"server": name, "server_info": init.get("serverInfo"),
            "instructions": init.get("instructions"), "tools": tools}


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    bin_dir = Path(sys.argv[1]) / "node_modules" / ".bin"
    OUT.mkdir(exist_ok=True)
    for name, (command, env) in SERVERS.items():
        listed = capture(name, str(bin_dir / command), env)
        (OUT / f"{name}.json").write_text(json.dumps(listed, indent=1, ensure_ascii=False) + "\n")
        print(f"{name}: {len(listed['tools'])} tools")


if __name__ == "__main__":
    main()
