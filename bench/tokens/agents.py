"""The two ways an agent can reach the same tools, each counted from the lines on the wire.

DirectAgent: the agent's client connects every configured upstream server itself. Its context
holds each server's tools/list result, each tools/call's params (the arguments the model
writes) and each tools/call's result, exactly as they crossed the wire.

CodeAgent: the agent's client connects only `code-execution-mcp serve`, configured with the
same upstreams. Its context holds our tools/list result, its discovery requests and answers
(search_tools, get_tool_definition), the execute_code requests (the code) and their answers.

Two views are counted, with the same rule on both sides:
  wire  the verbatim JSON text of `result` (and of the request's `params`) on the wire;
  lean  what a client that keeps only the essentials would pass to a model: per tool only
        name, description and inputSchema; per result only the text of its content blocks
        (results carry their data twice, as content text and as structuredContent).
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .wire import Exchange, McpError, StdioClient, TokenCounter, raw_member

BENCH = Path(__file__).resolve().parents[1]
NODE_BIN = BENCH / "node_modules" / ".bin"
PY_SERVERS = BENCH / ".bench-env" / "servers" / "bin"
PY_SERVERS_SDK1 = BENCH / ".bench-env" / "servers-sdk1" / "bin"

# Every server the benchmark knows, all started locally without credentials or network.
ALL_SERVERS = ["filesystem", "memory", "git", "sqlite", "time", "everything", "sequential-thinking", "fetch",
               "github", "playwright", "excel"]


def check_installed() -> None:
    need = [NODE_BIN / "mcp-server-filesystem", NODE_BIN / "playwright-mcp", PY_SERVERS / "python",
            PY_SERVERS_SDK1 / "mcp-server-sqlite"]
    missing = [str(p) for p in need if not p.exists()]
    if missing:
        raise SystemExit("missing upstream servers (" + ", ".join(missing) + "): run bench/setup first")
    for tool in ("node", "git"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is not on PATH")


def server_spec(name: str, state: Path) -> dict:
    """The mcpServers entry of one server, for a workflow whose state lives in `state`."""
    node = shutil.which("node")
    py = str(PY_SERVERS / "python")
    specs = {
        "filesystem": {"command": node, "args": [str(NODE_BIN / "mcp-server-filesystem"), str(state / "files")]},
        "memory": {"command": node, "args": [str(NODE_BIN / "mcp-server-memory")],
                   "env": {"MEMORY_FILE_PATH": str(state / "memory.jsonl")}},
        "git": {"command": py, "args": ["-m", "mcp_server_git"]},
        "sqlite": {"command": str(PY_SERVERS_SDK1 / "mcp-server-sqlite"), "args": ["--db-path", str(state / "events.db")]},
        "time": {"command": py, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]},
        "everything": {"command": node, "args": [str(NODE_BIN / "mcp-server-everything"), "stdio"]},
        "sequential-thinking": {"command": node, "args": [str(NODE_BIN / "mcp-server-sequential-thinking")],
                                "env": {"DISABLE_THOUGHT_LOGGING": "true"}},
        "fetch": {"command": py, "args": ["-m", "mcp_server_fetch"]},
        "github": {"command": node, "args": [str(NODE_BIN / "mcp-server-github")]},
        "playwright": {"command": node, "args": [str(NODE_BIN / "playwright-mcp"), "--headless", "--isolated"]},
        "excel": {"command": str(PY_SERVERS / "excel-mcp-server"), "args": ["stdio"],
                  "env": {"EXCEL_FILES_PATH": str(state / "files")}},
    }
    return specs[name]


def text_of(result: dict) -> str:
    """The text a model reads from a tools/call result: its text blocks (others as JSON)."""
    parts = []
    for block in result.get("content", []):
        parts.append(block["text"] if block.get("type") == "text" else json.dumps(block, separators=(",", ":")))
    return "\n".join(parts)


def lean_tools(result: dict) -> str:
    return json.dumps([{k: t[k] for k in ("name", "description", "inputSchema") if k in t} for t in result["tools"]],
                      separators=(",", ":"), ensure_ascii=False)


@dataclass
class Record:
    kind: str          # schemas | call | tools_list | discovery | execute
    server: str
    name: str          # tool name, or the method
    params_tokens: int
    result_tokens: int
    params_lean: int
    result_lean: int
    seconds: float


@dataclass
class Tally:
    records: list[Record] = field(default_factory=list)
    start_seconds: float = 0.0
    upstream_calls: int = 0     # tool calls made by code inside the sandbox (execute_code's tool_calls)

    def add(self, tc: TokenCounter, kind: str, server: str, ex: Exchange, lean_result: str | None = None,
            count_params: bool = True) -> Record:
        result_text = ex.result_json()
        params_text = raw_member(ex.request_line, "params") if count_params else ""
        lean_params = params_text
        if lean_result is None:
            lean_result = text_of(ex.result)
        rec = Record(kind, server, ex.request["params"].get("name", ex.method) if ex.method == "tools/call" else ex.method,
                     tc.count(params_text) if params_text else 0, tc.count(result_text),
                     tc.count(lean_params) if lean_params else 0, tc.count(lean_result), ex.seconds)
        self.records.append(rec)
        return rec

    def sum(self, kind: str, what: str) -> int:
        return sum(getattr(r, what) for r in self.records if r.kind == kind)

    def seconds(self, *kinds: str) -> float:
        return sum(r.seconds for r in self.records if not kinds or r.kind in kinds)

    def count(self, kind: str) -> int:
        return sum(1 for r in self.records if r.kind == kind)


class DirectAgent:
    """Connects each upstream itself (concurrently, as agent clients do) and calls tools directly."""

    def __init__(self, servers: list[str], state: Path, tc: TokenCounter, logs: Path):
        self.tc = tc
        self.tally = Tally()
        self.clients: dict[str, StdioClient] = {}
        self.schemas: dict[str, int] = {}
        self.tool_counts: dict[str, int] = {}
        errors: list[BaseException] = []
        lock = threading.Lock()

        def start(name: str) -> None:
            try:
                spec = server_spec(name, state)
                c = StdioClient(name, [spec["command"], *spec["args"]], env=spec.get("env"),
                                stderr_path=str(logs / f"direct-{name}.err"))
                with lock:
                    self.clients[name] = c
                listed[name] = c.list_tools()
            except BaseException as e:  # noqa: BLE001 - reported below
                with lock:
                    errors.append(e)

        listed: dict = {}
        t0 = time.perf_counter()
        threads = [threading.Thread(target=start, args=(n,)) for n in servers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.tally.start_seconds = time.perf_counter() - t0
        if errors:
            self.close()
            raise errors[0]
        for name in servers:  # in the configured order
            tl = listed[name]
            rec = self.tally.add(tc, "schemas", name, tl, lean_result=lean_tools(tl.result), count_params=False)
            rec.seconds = 0.0  # inside start_seconds
            self.schemas[name] = rec.result_tokens
            self.tool_counts[name] = len(tl.result["tools"])

    def call(self, server: str, tool: str, arguments: dict) -> dict:
        ex = self.clients[server].call(tool, arguments)
        self.tally.add(self.tc, "call", server, ex)
        result = ex.result
        if result.get("isError"):
            raise McpError(f"{server}.{tool} failed: {text_of(result)[:500]}")
        return result

    def text(self, server: str, tool: str, arguments: dict) -> str:
        return text_of(self.call(server, tool, arguments))

    def transcript(self) -> list[str]:
        return [line for c in self.clients.values() for ex in c.log for line in (ex.request_line, ex.response_line)]

    def close(self) -> None:
        for c in self.clients.values():
            c.close()


class CodeAgent:
    """Connects only `code-execution-mcp serve`, configured with the same upstreams."""

    def __init__(self, binary: str, servers: list[str], state: Path, data_dir: Path, tc: TokenCounter, logs: Path,
                 tools_mode: str = "full"):
        self.tc = tc
        self.tally = Tally()
        config = data_dir / "mcp_config.json"
        data_dir.mkdir(parents=True, exist_ok=True)
        config.write_text(json.dumps({"mcpServers": {n: server_spec(n, state) for n in servers}}, indent=2))
        argv = [binary, "--config", str(config), "--data-dir", str(data_dir), "--log-level", "error", "serve"]
        if tools_mode != "full":
            argv += ["--tools", tools_mode]
        t0 = time.perf_counter()
        self.client = StdioClient("code-execution-mcp", argv, env=None, stderr_path=str(logs / "code-serve.err"))
        tl = self.client.list_tools()
        self.tally.start_seconds = time.perf_counter() - t0
        rec = self.tally.add(tc, "tools_list", "code-execution-mcp", tl, lean_result=lean_tools(tl.result),
                             count_params=False)
        rec.seconds = 0.0
        self.tool_names = [t["name"] for t in tl.result["tools"]]
        self.workspace = data_dir / "workspace"

    def _tool(self, kind: str, name: str, arguments: dict) -> dict:
        ex = self.client.call(name, arguments)
        self.tally.add(self.tc, kind, "code-execution-mcp", ex)
        result = ex.result
        body = result.get("structuredContent")
        if body is None:
            body = json.loads(text_of(result))
        if result.get("isError") or not body.get("success", False):
            raise McpError(f"{name} failed: {json.dumps(body)[:3000]}")
        return body

    def search(self, query: str, expect: str, **kw) -> dict:
        """search_tools; `expect` ("server.tool") must be among the hits, as the agent needs it there."""
        body = self._tool("discovery", "search_tools", {"query": query, **kw})
        hits = [f"{t['server']}.{t['name']}" if isinstance(t, dict) else t for t in body.get("tools", [])]
        if expect not in hits:
            raise McpError(f"search_tools({query!r}) did not find {expect}: {hits}")
        return body

    def definition(self, tool_name: str) -> dict:
        return self._tool("discovery", "get_tool_definition", {"tool_name": tool_name})

    def execute(self, code: str, **kw) -> dict:
        body = self._tool("execute", "execute_code", {"code": code, **kw})
        self.tally.upstream_calls += int(body.get("tool_calls", 0))
        return body

    def response_lines(self) -> list[str]:
        return [ex.response_line for ex in self.client.log]

    def transcript(self) -> list[str]:
        return [line for ex in self.client.log for line in (ex.request_line, ex.response_line)]

    def close(self) -> None:
        self.client.close()
