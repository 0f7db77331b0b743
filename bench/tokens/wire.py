"""A minimal MCP client over stdio that records every line exactly as it crossed the wire.

Newline-delimited JSON-RPC (the MCP stdio transport): `initialize`, then
`notifications/initialized`, then requests. Each request's line as written and
its response's line as read are kept verbatim, so a token count of "what
crossed the wire" counts those very bytes, not a re-serialisation.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from dataclasses import dataclass

PROTOCOL = "2025-06-18"


class McpError(RuntimeError):
    pass


@dataclass
class Exchange:
    """One request and its response, as the raw lines and decoded."""

    method: str
    request_line: str
    response_line: str
    request: dict
    response: dict
    seconds: float

    @property
    def params_json(self) -> str:
        """The exact text of the request's `params` as sent (we write it, so we know its bytes)."""
        return json.dumps(self.request.get("params", {}), separators=(",", ":"), ensure_ascii=False)

    @property
    def result(self) -> dict:
        if "error" in self.response:
            raise McpError(f"{self.method}: {self.response['error']}")
        return self.response["result"]

    def result_json(self) -> str:
        """The exact text of the response's `result` as received.

        Cut out of the raw line, not re-serialised: the line is
        {"jsonrpc":"2.0","id":N,"result":...} or {"result":...,"jsonrpc":..,"id":..}
        in whatever order the server wrote it, so the value is located by
        decoding with raw_decode from where `"result":` starts.
        """
        return raw_member(self.response_line, "result")


def raw_member(line: str, key: str) -> str:
    """The verbatim JSON text of a top-level member of the object on `line`."""
    dec = json.JSONDecoder()
    i = line.index("{") + 1
    n = len(line)
    while i < n:
        while line[i] in " \t\r\n,":
            i += 1
        if line[i] == "}":
            break
        name, i = dec.raw_decode(line, i)
        while line[i] in " \t\r\n":
            i += 1
        assert line[i] == ":"
        i += 1
        while line[i] in " \t\r\n":
            i += 1
        value, end = dec.raw_decode(line, i)
        if name == key:
            return line[i:end]
        i = end
    raise KeyError(key)


class StdioClient:
    def __init__(self, name: str, argv: list[str], env: dict | None = None, cwd: str | None = None,
                 stderr_path: str | None = None, timeout: float = 120):
        self.name = name
        self.timeout = timeout
        # Our own settings must not leak into the child (the config is passed explicitly).
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("CODE_EXECUTION_MCP_")}
        full_env.update(env or {})
        self._err = open(stderr_path, "ab") if stderr_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err,
                                     env=full_env, cwd=cwd, bufsize=0)
        self._lines: queue.Queue = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.next_id = 0
        self.log: list[Exchange] = []
        self.server_requests: list[dict] = []
        init = self.request("initialize", {"protocolVersion": PROTOCOL, "capabilities": {},
                                           "clientInfo": {"name": "bench-tokens", "version": "1"}})
        self.server_info = init.result.get("serverInfo", {})
        self.notify("notifications/initialized")

    def _read(self) -> None:
        for raw in self.proc.stdout:
            self._lines.put(raw.decode("utf-8"))
        self._lines.put(None)

    def _write(self, line: str) -> None:
        self.proc.stdin.write(line.encode("utf-8") + b"\n")
        self.proc.stdin.flush()

    def notify(self, method: str, params: dict | None = None) -> None:
        msg = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        self._write(json.dumps(msg, separators=(",", ":"), ensure_ascii=False))

    def request(self, method: str, params: dict | None = None) -> Exchange:
        self.next_id += 1
        rid = self.next_id
        msg = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        line = json.dumps(msg, separators=(",", ":"), ensure_ascii=False)
        t0 = time.perf_counter()
        self._write(line)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                raw = self._lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise McpError(f"{self.name}: no answer to {method} within {self.timeout}s") from None
            if raw is None:
                raise McpError(f"{self.name}: exited ({self.proc.poll()}) before answering {method}")
            raw = raw.rstrip("\r\n")
            if not raw.strip():
                continue
            msg_in = json.loads(raw)
            if "method" in msg_in:
                # A request or notification from the server (logging, roots/list, ping...).
                self.server_requests.append(msg_in)
                if "id" in msg_in:
                    self._answer_server_request(msg_in)
                continue
            if msg_in.get("id") == rid:
                ex = Exchange(method, line, raw, msg, msg_in, time.perf_counter() - t0)
                self.log.append(ex)
                return ex

    def _answer_server_request(self, msg: dict) -> None:
        if msg["method"] == "ping":
            result: dict = {}
        elif msg["method"] == "roots/list":
            result = {"roots": []}
        else:
            self._write(json.dumps({"jsonrpc": "2.0", "id": msg["id"],
                                    "error": {"code": -32601, "message": "not supported"}}))
            return
        self._write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}))

    def list_tools(self) -> Exchange:
        ex = self.request("tools/list", {})
        assert "nextCursor" not in ex.result, f"{self.name}: paginated tools/list not handled"
        return ex

    def call(self, tool: str, arguments: dict) -> Exchange:
        return self.request("tools/call", {"name": tool, "arguments": arguments})

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._err is not subprocess.DEVNULL:
            self._err.close()


class TokenCounter:
    """`code-execution-mcp tokens`: one process, asked line by line (o200k, as execute_code counts)."""

    def __init__(self, binary: str):
        self.proc = subprocess.Popen([binary, "tokens"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        self.cache: dict[str, int] = {}

    def count(self, text: str) -> int:
        if text in self.cache:
            return self.cache[text]
        self.proc.stdin.write(json.dumps(text).encode() + b"\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the tokens process exited")
        n = int(line)
        self.cache[text] = n
        return n

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=10)
