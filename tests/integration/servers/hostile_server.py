"""A hostile upstream MCP server for the tests and `scripts/bench hostile`.

Plain Python, no dependencies: it speaks MCP's stdio transport (one JSON-RPC
message a line) by hand, so that it can send what no SDK would let it send.
What it does is chosen by environment variables:

- HOSTILE_TOOLS_FILE: a JSON file whose content is the `tools` array its
  tools/list returns verbatim (names of any length, NULs, odd parameter names).
  Without it, it lists one tool, `echo`.
- HOSTILE_PAGES: how many pages tools/list has ("endless": a `nextCursor` on
  every page); HOSTILE_PAGE_SIZE: tools per page (generated `tool_<page>_<i>`
  with a description of HOSTILE_DESCRIPTION_BYTES bytes, default 64).
- HOSTILE_LIST_CHANGED_HZ: after `notifications/initialized`, announces
  `notifications/tools/list_changed` this many times a second, for ever.
- HOSTILE_CHANGING: set, every tools/list adds one tool `gen_<n>` (n counts
  the listings), so each listing differs from the last.
- HOSTILE_TRIGGER_FILE: set, the announcements and the paging above happen
  only while this file exists (else it lists its ordinary tools and is quiet):
  `scripts/bench hostile` turns the attack on and off with it.
- HOSTILE_STDERR_BYTES: bytes written to stderr at start, in 100-byte lines.
- HOSTILE_STATE_FILE: `remember(text)` appends to it and `recall()` reads it
  (with no value set, a file `hostile_state.txt` in the working directory;
  `remember(text, path)` and `recall(path)` use `path` instead): a stateful server, like
  server-memory, for the tenancy tests.

Every tool answers its name and the length of its arguments as text;
`shout(bytes)` writes that many bytes to stderr first; `where()` answers the
process's HOME, TMPDIR, XDG_DATA_HOME and working directory as JSON.
"""

import json
import os
import sys
import threading
import time

OUT_LOCK = threading.Lock()


def send(message):
    line = json.dumps(message) + "\n"
    with OUT_LOCK:
        sys.stdout.write(line)
        sys.stdout.flush()


def page_tools(page):
    size = int(os.environ.get("HOSTILE_PAGE_SIZE", "100"))
    description = "d" * int(os.environ.get("HOSTILE_DESCRIPTION_BYTES", "64"))
    return [
        {
            "name": f"tool_{page}_{i}",
            "description": description,
            "inputSchema": {"type": "object", "properties": {}},
        }
        for i in range(size)
    ]


def base_tools():
    path = os.environ.get("HOSTILE_TOOLS_FILE")
    if path:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    tools = []
    for name, doc, props in [
        ("echo", "Answers its name.", {"text": {"type": "string"}}),
        ("shout", "Writes `bytes` bytes to stderr, then answers.", {"bytes": {"type": "integer"}}),
        ("remember", "Appends text to the server's state file (or to `path`).",
         {"text": {"type": "string"}, "path": {"type": "string"}}),
        ("recall", "Reads the server's state file (or `path`).", {"path": {"type": "string"}}),
        ("where", "Where the process keeps its state.", {}),
    ]:
        tools.append(
            {
                "name": name,
                "description": doc,
                "inputSchema": {"type": "object", "properties": props},
            }
        )
    return tools


def state_file():
    return os.environ.get("HOSTILE_STATE_FILE") or os.path.join(os.getcwd(), "hostile_state.txt")


LISTINGS = [0]


def attacking():
    trigger = os.environ.get("HOSTILE_TRIGGER_FILE")
    return not trigger or os.path.exists(trigger)


def list_tools(params):
    pages = os.environ.get("HOSTILE_PAGES") if attacking() else None
    if not pages:
        tools = base_tools()
        if os.environ.get("HOSTILE_CHANGING"):
            LISTINGS[0] += 1
            tools.append({"name": f"gen_{LISTINGS[0]}", "description": "changes with every listing",
                          "inputSchema": {"type": "object", "properties": {}}})
        return {"tools": tools}
    cursor = (params or {}).get("cursor")
    page = int(cursor) if cursor else 0
    result = {"tools": page_tools(page)}
    if pages == "endless" or page + 1 < int(pages):
        result["nextCursor"] = str(page + 1)
    return result


def call_tool(params):
    name = params.get("name", "")
    args = params.get("arguments") or {}
    if name == "shout":
        n = int(args.get("bytes", 0))
        line = ("e" * 99) + "\n"
        for _ in range(n // 100):
            sys.stderr.write(line)
        sys.stderr.flush()
    if name == "remember":
        try:
            with open(args.get("path") or state_file(), "a", encoding="utf-8") as f:
                f.write(str(args.get("text", "")) + "\n")
        except OSError as e:
            return {"content": [{"type": "text", "text": f"cannot write: {e}"}], "isError": True}
    if name == "recall":
        try:
            with open(args.get("path") or state_file(), encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            text = f"no state: {e}"
        return {"content": [{"type": "text", "text": text}]}
    if name == "where":
        where = {
            key: os.environ.get(key)
            for key in ("HOME", "TMPDIR", "XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")
        }
        where["cwd"] = os.getcwd()
        return {"content": [{"type": "text", "text": json.dumps(where)}]}
    size = len(json.dumps(args))
    return {"content": [{"type": "text", "text": f"called {name} ({size} bytes of arguments)"}]}


def announce_changes(hz):
    while True:
        time.sleep(1.0 / hz)
        if attacking():
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})


def main():
    flood = int(os.environ.get("HOSTILE_STDERR_BYTES", "0"))
    if flood:
        line = ("s" * 99) + "\n"
        for _ in range(flood // 100):
            sys.stderr.write(line)
        sys.stderr.flush()
    for raw in sys.stdin:
        raw = raw.strip()
        if not raw:
            continue
        try:
            message = json.loads(raw)
        except ValueError:
            continue
        method = message.get("method")
        ident = message.get("id")
        if method == "notifications/initialized":
            hz = float(os.environ.get("HOSTILE_LIST_CHANGED_HZ", "0"))
            if hz > 0:
                threading.Thread(target=announce_changes, args=(hz,), daemon=True).start()
            continue
        if ident is None:
            continue
        if method == "initialize":
            version = (message.get("params") or {}).get("protocolVersion", "2025-06-18")
            result = {
                "protocolVersion": version,
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": "hostile", "version": "1.0"},
            }
        elif method == "tools/list":
            result = list_tools(message.get("params"))
        elif method == "tools/call":
            result = call_tool(message.get("params") or {})
        elif method == "ping":
            result = {}
        else:
            send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": "no such method"}})
            continue
        send({"jsonrpc": "2.0", "id": ident, "result": result})


if __name__ == "__main__":
    main()
