"""Raw stateless (2026-07-28) MCP requests over HTTP, as many tenants at once would send them.

    tenant = Stateless(server.url, "token")
    answer = tenant.call("execute_code", {"code": "result = 1"})   # the tool's JSON answer (a dict)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import httpx2 as httpx

ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}}


@dataclass
class Stateless:
    url: str
    token: str | None = None

    def result(self, tool: str, args: dict | None = None, timeout: float = 120) -> dict:
        """One tools/call: its MCP result."""
        body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                "params": {"name": tool, "arguments": args or {}, "_meta": META}}
        h = {**ACCEPT, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": tool}
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        r = httpx.post(self.url, json=body, headers=h, timeout=timeout)
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {r.text[:500]}")
        message = message_of(r)
        if "error" in message:
            raise RuntimeError(f"JSON-RPC error: {message['error']}")
        return message["result"]

    def call(self, tool: str, args: dict | None = None, timeout: float = 120) -> dict:
        """One tools/call: the tool's JSON answer (refusals come back as {"error": text, "isError": True})."""
        result = self.result(tool, args, timeout)
        if result.get("isError") and "structuredContent" not in result:
            return {"isError": True, "error": "".join(c.get("text", "") for c in result["content"])}
        return body(result)


def message_of(r: httpx.Response) -> dict:
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        messages = [json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:") and line[5:].strip()]
        return [m for m in messages if "id" in m][-1]
    return r.json()


def body(result: dict) -> dict:
    if "structuredContent" in result:
        return result["structuredContent"]
    return json.loads(result["content"][0]["text"])


def proc_status(pid: int) -> dict[str, int]:
    """Threads, VmRSS and VmHWM (kB) of a process, from /proc."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("Threads", "VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out
