"""The server over streamable HTTP: clients, DNS-rebinding checks, auth, sessions, shutdown."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import httpx2 as httpx  # the HTTP client mcp 2.x is built on
import pytest
from mcp import Client

from conftest import ALL_TOOLS, HttpServer, run_cli, start_http

pytestmark = pytest.mark.anyio

ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
def anyio_backend():
    return "asyncio"


def initialize(version: str = "2025-11-25") -> dict:
    return {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}


def sse_json(body: str) -> list[dict]:
    """JSON-RPC messages in an SSE (or plain JSON) body."""
    body = body.strip()
    if body.startswith("{"):
        return [json.loads(body)]
    return [json.loads(line[5:]) for line in body.splitlines() if line.startswith("data:") and line[5:].strip()]


async def test_sdk2_client_over_http(http_server: HttpServer):
    async with Client(http_server.url) as client:
        assert client.protocol_version == "2026-07-28"
        w = await client.call_tool("write_workspace_file", {"filename": "h.txt", "content": "over http"})
        assert not w.is_error
        r = await client.call_tool("read_workspace_file", {"filename": "h.txt"})
        assert r.structured_content["content"] == "over http"
        bad = await client.call_tool("read_workspace_file", {"filename": "../../etc/passwd"})
        assert bad.is_error and "'..' is not allowed" in bad.structured_content["error"]
        listed = await client.call_tool("list_workspace_files", {})
        assert [f["path"] for f in listed.structured_content["files"]] == ["h.txt"]
        missing = await client.call_tool("write_workspace_file", {"filename": "x.txt"})
        assert missing.is_error and "missing required argument 'content'" in missing.structured_content["error"]


async def test_sdk2_legacy_mode_over_http(http_server: HttpServer):
    async with Client(http_server.url, mode="legacy") as client:
        assert client.protocol_version == "2025-11-25"
        tools = await client.list_tools()
        assert "write_workspace_file" in [t.name for t in tools.tools]


@pytest.mark.parametrize("version", ["2025-06-18", "2025-11-25"])
def test_protocol_versions_over_http(http_server: HttpServer, version: str):
    r = httpx.post(http_server.url, json=initialize(version), headers=ACCEPT, timeout=10)
    assert r.status_code == 200
    assert sse_json(r.text)[0]["result"]["protocolVersion"] == version


@pytest.mark.parametrize(
    "headers",
    [{"Host": "evil.example"}, {"Host": "evil.example:8765"}, {"Host": "127.0.0.1.nip.io"}],
)
def test_foreign_host_is_forbidden(http_server: HttpServer, headers: dict):
    r = httpx.post(http_server.url, json=initialize(), headers={**ACCEPT, **headers}, timeout=10)
    assert r.status_code == 403


@pytest.mark.parametrize("origin", ["http://evil.example", "https://attacker.example:443", "null"])
def test_foreign_origin_is_forbidden(http_server: HttpServer, origin: str):
    r = httpx.post(http_server.url, json=initialize(), headers={**ACCEPT, "Origin": origin}, timeout=10)
    assert r.status_code == 403


def test_loopback_origin_and_host_are_allowed(http_server: HttpServer):
    headers = {**ACCEPT, "Origin": "http://localhost:5173", "Host": f"localhost:{http_server.port}"}
    r = httpx.post(http_server.url, json=initialize(), headers=headers, timeout=10)
    assert r.status_code == 200


def test_extra_allowed_host_and_origin(data_dir: Path):
    server = start_http(data_dir, "--allowed-host", "mcp.internal", "--allowed-origin", "https://app.internal:443")
    try:
        ok = httpx.post(server.url, json=initialize(),
                        headers={**ACCEPT, "Host": "mcp.internal", "Origin": "https://app.internal"}, timeout=10)
        assert ok.status_code == 200
        other = httpx.post(server.url, json=initialize(), headers={**ACCEPT, "Host": "other.internal"}, timeout=10)
        assert other.status_code == 403
    finally:
        server.stop()


@pytest.mark.parametrize("auth", [None, "Bearer wrong-token", "Basic dGVzdA==", "Bearer test-token-1234", "test-token-123"])
def test_token_required(authed_server: HttpServer, auth: str | None):
    headers = dict(ACCEPT)
    if auth:
        headers["Authorization"] = auth
    r = httpx.post(authed_server.url, json=initialize(), headers=headers, timeout=10)
    assert r.status_code == 401
    challenge = r.headers.get("www-authenticate", "")
    # No credential: a bare challenge; a wrong one: RFC 6750's error code.
    if auth is None:
        assert challenge == "Bearer"
    elif auth.lower().startswith("bearer "):
        assert challenge.startswith('Bearer error="invalid_token"'), challenge
    else:
        assert challenge.startswith('Bearer error="invalid_request"'), challenge
    assert "bearer token" in r.text


async def test_token_accepted(authed_server: HttpServer):
    r = httpx.post(authed_server.url, json=initialize(),
                   headers={**ACCEPT, "Authorization": "Bearer test-token-123"}, timeout=10)
    assert r.status_code == 200
    async with httpx.AsyncClient(headers={"Authorization": "Bearer test-token-123"}) as http:
        from mcp.client.streamable_http import streamable_http_client
        async with Client(streamable_http_client(authed_server.url, http_client=http)) as client:
            tools = await client.list_tools()
            assert [t.name for t in tools.tools] == ALL_TOOLS


def test_token_from_environment(data_dir: Path):
    server = start_http(data_dir, env={"CODE_EXECUTION_MCP_AUTH_TOKEN": "env-token"})
    try:
        assert httpx.post(server.url, json=initialize(), headers=ACCEPT, timeout=10).status_code == 401
        r = httpx.post(server.url, json=initialize(), headers={**ACCEPT, "Authorization": "Bearer env-token"}, timeout=10)
        assert r.status_code == 200
    finally:
        server.stop()


def open_http_session(server: HttpServer) -> str:
    """Initializes a stateful (2025-11-25) session over raw HTTP; returns its id."""
    r = httpx.post(server.url, json=initialize(), headers=ACCEPT, timeout=10)
    sid = r.headers["mcp-session-id"]
    httpx.post(server.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
               headers={**ACCEPT, "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}, timeout=10)
    return sid


def test_sessions_are_separate(http_server: HttpServer):
    def list_tools(sid: str) -> httpx.Response:
        return httpx.post(http_server.url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                          headers={**ACCEPT, "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}, timeout=10)

    a, b = open_http_session(http_server), open_http_session(http_server)
    assert a != b
    assert list_tools(a).status_code == 200 and list_tools(b).status_code == 200
    # Ending one session leaves the other untouched.
    d = httpx.delete(http_server.url, headers={"Mcp-Session-Id": a, "MCP-Protocol-Version": "2025-11-25"}, timeout=10)
    assert d.status_code < 300
    assert list_tools(a).status_code == 404
    r = list_tools(b)
    assert r.status_code == 200 and [t["name"] for t in sse_json(r.text)[0]["result"]["tools"]] == ALL_TOOLS


def test_deleting_a_session_answers_no_content(http_server: HttpServer):
    # rmcp answers 202 Accepted, which the Python SDK warns about: the session is gone, not pending.
    sid = open_http_session(http_server)
    d = httpx.delete(http_server.url, headers={"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}, timeout=10)
    assert d.status_code == 204, (d.status_code, d.text)
    assert d.content == b""
    after = httpx.post(http_server.url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                       headers={**ACCEPT, "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}, timeout=10)
    assert after.status_code == 404


@pytest.mark.parametrize("body", [b"{not json", b"", b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"'])
def test_body_that_is_not_json_is_a_parse_error(http_server: HttpServer, body: bytes):
    r = httpx.post(http_server.url, content=body, headers=ACCEPT, timeout=10)
    assert r.status_code == 400, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json")
    answer = r.json()
    assert answer["jsonrpc"] == "2.0" and answer["id"] is None
    assert answer["error"]["code"] == -32700
    message = answer["error"]["message"]
    assert message.startswith("Parse error: ") and "send one JSON-RPC message" in message, message
    if not body:
        assert "the request body is empty" in message


@pytest.mark.parametrize("in_session", [False, True])
def test_batch_is_refused(http_server: HttpServer, in_session: bool):
    headers = dict(ACCEPT)
    if in_session:
        headers.update({"Mcp-Session-Id": open_http_session(http_server), "MCP-Protocol-Version": "2025-11-25"})
    batch = [{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, {"jsonrpc": "2.0", "id": 3, "method": "ping"}]
    r = httpx.post(http_server.url, json=batch, headers=headers, timeout=10)
    assert r.status_code == 400, (r.status_code, r.text)
    answer = r.json()
    assert answer["jsonrpc"] == "2.0" and answer["id"] is None
    assert answer["error"]["code"] == -32600
    assert answer["error"]["message"].endswith(
        "batches are not supported; send one JSON-RPC message per request"), answer


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_shuts_down_cleanly(data_dir: Path, sig: int):
    server = start_http(data_dir)
    assert httpx.post(server.url, json=initialize(), headers=ACCEPT, timeout=10).status_code == 200
    assert server.stop(sig) == 0
    assert "shut down cleanly" in server.log_text()


def test_public_bind_without_token_is_refused(data_dir: Path):
    out = run_cli("--data-dir", str(data_dir), "serve", "--http", "0.0.0.0:0")
    assert out.returncode != 0
    assert "without an auth token" in out.stderr
    assert "--auth-token" in out.stderr


def test_http_sessions_have_their_own_vaults_and_interpreters(http_server: HttpServer):
    def call(sid: str, tool: str, args: dict) -> dict:
        r = httpx.post(http_server.url, json={"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                                              "params": {"name": tool, "arguments": args}},
                       headers={**ACCEPT, "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}, timeout=60)
        return sse_json(r.text)[0]["result"]["structuredContent"]

    a, b = open_http_session(http_server), open_http_session(http_server)
    token = call(a, "sanitize_pii", {"text": "ada@example.com"})["sanitized_text"]
    assert token == "[EMAIL_1]"
    assert call(a, "restore_pii", {"text": token})["restored_text"] == "ada@example.com"
    assert call(b, "restore_pii", {"text": token})["restored_text"] == token, "session b restored a's token"
    # The same session_id names two interpreters in two MCP sessions.
    assert call(a, "execute_code", {"code": "x = 41", "session_id": "work"})["success"]
    other = call(b, "execute_code", {"code": "result = 'x' in globals()", "session_id": "work"})
    assert other["result"] is False and other["session_id"] == "work", other
    mine = call(a, "execute_code", {"code": "result = x + 1", "session_id": "work"})
    assert mine["result"] == 42
