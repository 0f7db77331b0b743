"""An upstream MCP server that takes each person's own API key, and no OAuth (issue 58's tests).

    python keyed_server.py --key NAME=KEY [--key ...] [--port PORT] [--log FILE] [--exit-on-stdin-eof]

Streamable HTTP at /mcp (the MCP Python SDK's MCPServer). A request whose `X-Api-Key` header is one
of the keys acts as that key's NAME; any other gets 401 with `WWW-Authenticate: ApiKey realm="keyed"`
(no Bearer challenge, no authorization metadata anywhere). Tools:
  whoami()  -> {"owner": NAME}

--log FILE gets one JSON line per HTTP request: method, path, status, owner (or null), key (the first
16 hex digits of the key's SHA-256, or null). Once listening it prints one JSON line: {"url", "port"}.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import hashlib
import json
import os
import signal
import socket
import sys
import threading

import uvicorn
from mcp.server.mcpserver import MCPServer

OWNER: contextvars.ContextVar[str | None] = contextvars.ContextVar("owner", default=None)


class KeyCheck:
    """Outermost: a request without a known key never reaches the MCP app."""

    def __init__(self, app, keys: dict[str, str], log_path: str | None):
        self.app, self.keys, self.log_path = app, keys, log_path
        self.lock = threading.Lock()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        given = headers.get("x-api-key")
        owner = self.keys.get(given) if given else None
        record = {"event": "request", "method": scope["method"], "path": scope["path"], "owner": owner,
                  "key": hashlib.sha256(given.encode()).hexdigest()[:16] if given else None, "status": None}
        try:
            if owner is None:
                record["status"] = 401
                body = b'{"error": "a known X-Api-Key is required"}'
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode()),
                                        (b"www-authenticate", b'ApiKey realm="keyed"')]})
                await send({"type": "http.response.body", "body": body})
                return

            async def logged_send(message):
                if message["type"] == "http.response.start":
                    record["status"] = message["status"]
                await send(message)

            token = OWNER.set(owner)
            try:
                await self.app(scope, receive, logged_send)
            finally:
                OWNER.reset(token)
        finally:
            if self.log_path:
                with self.lock, open(self.log_path, "a") as f:
                    f.write(json.dumps(record) + "\n")


class Server(uvicorn.Server):
    ready_line: str = ""

    async def startup(self, sockets=None):
        await super().startup(sockets)
        if self.started:
            sys.stdout.write(self.ready_line + "\n")
            sys.stdout.flush()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--key", action="append", default=[], help="NAME=KEY")
    p.add_argument("--log")
    p.add_argument("--exit-on-stdin-eof", action="store_true")
    args = p.parse_args()
    keys = {key: name for name, _, key in (k.partition("=") for k in args.key)}

    mcp = MCPServer("keyed", instructions="Answers with the owner of the API key it was called with.")

    @mcp.tool()
    def whoami() -> dict:
        """Whose API key this call carries."""
        return {"owner": OWNER.get()}

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    port = sock.getsockname()[1]
    app = KeyCheck(mcp.streamable_http_app(streamable_http_path="/mcp"), keys, args.log)
    server = Server(uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2))
    server.ready_line = json.dumps({"url": f"http://127.0.0.1:{port}/mcp", "port": port})
    if args.exit_on_stdin_eof:
        def watch() -> None:
            sys.stdin.buffer.read()
            os.kill(os.getpid(), signal.SIGTERM)

        threading.Thread(target=watch, daemon=True).start()
    asyncio.run(server.serve(sockets=[sock]))


if __name__ == "__main__":
    main()
