"""Teams: OAuth sign-in against a real OpenID provider, one tenant per principal, quotas.

The identity provider is `oidc-provider` (npm), started locally by `oidc.OidcProvider`; it issues
real signed JWT access tokens (client credentials, RFC 8707 resource indicators). The clients are
the MCP Python SDK (its OAuth client-credentials support where it drives the flow) and raw HTTP
where the status codes and headers are the point.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2 as httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from conftest import HttpServer, run_cli, start_http
from oidc import OTHER_RESOURCE, OidcProvider, free_port

pytestmark = pytest.mark.anyio

ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
def anyio_backend():
    return "asyncio"


def start_server(data_dir: Path, port: int, config: dict) -> HttpServer:
    """`serve --http 127.0.0.1:PORT` with `config` (the port is the token audience, so it is fixed)."""
    cfg = data_dir.parent / f"config-{port}.json"
    cfg.write_text(json.dumps(config))
    return start_http(data_dir, addr=f"127.0.0.1:{port}", config=cfg)


def oauth_config(resource: str, issuer: str, **extra) -> dict:
    return {"auth": {"resource": resource, "oauth": {"issuer": issuer, "leeway_seconds": 0}}, **extra}


@pytest.fixture
def idp(tmp_path: Path):
    """A provider and a server that trusts it, with the server's URL as the token audience."""
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    data = tmp_path / "data"
    data.mkdir()
    with OidcProvider(resource, log_dir=tmp_path) as op:
        server = start_server(data, port, oauth_config(resource, op.issuer))
        try:
            yield op, server
        finally:
            server.stop()


@asynccontextmanager
async def bearer_client(url: str, token: str):
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx.Timeout(30, read=120)) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            yield client


def initialize(version: str = "2025-11-25") -> dict:
    return {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}


def call(tool: str, args: dict | None = None) -> dict:
    return {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": tool, "arguments": args or {}}}


STATELESS_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
                  "io.modelcontextprotocol/clientCapabilities": {}}


def post(url: str, body: dict, token: str | None = None, **headers) -> httpx.Response:
    """One raw request: stateless (2026-07-28) unless it initializes or names a session."""
    h = {**ACCEPT, **headers}
    if token:
        h["Authorization"] = f"Bearer {token}"
    if body.get("method") != "initialize" and "Mcp-Session-Id" not in headers:
        h["MCP-Protocol-Version"] = "2026-07-28"
        h["Mcp-Method"] = body["method"]
        if body["method"] == "tools/call":
            h["Mcp-Name"] = body["params"]["name"]
        body = {**body, "params": {**body.get("params", {}), "_meta": STATELESS_META}}
    return httpx.post(url, json=body, headers=h, timeout=30)


def challenge(r: httpx.Response) -> dict[str, str]:
    header = r.headers.get("www-authenticate", "")
    assert header.startswith("Bearer"), header
    return dict(re.findall(r'(\w+)="([^"]*)"', header))


# --- the resource server ------------------------------------------------------------------------


def test_metadata_and_challenge_lead_a_client_to_the_provider(idp):
    op, server = idp
    meta_url = f"http://127.0.0.1:{server.port}/.well-known/oauth-protected-resource/mcp"
    for url in (meta_url, f"http://127.0.0.1:{server.port}/.well-known/oauth-protected-resource"):
        meta = httpx.get(url, timeout=10).json()
        assert meta["resource"] == server.url
        assert meta["authorization_servers"] == [op.issuer]
        assert {"execute", "tools:read", "skills:write", "admin"} <= set(meta["scopes_supported"])
    r = post(server.url, initialize())
    assert r.status_code == 401
    assert challenge(r) == {"resource_metadata": meta_url}


async def test_sdk_client_credentials_flow_end_to_end(tmp_path: Path):
    """The SDK discovers the provider from our 401 and metadata, gets a token for our resource, works."""
    from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider

    class Memory:
        def __init__(self):
            self.tokens = self.client_info = None

        async def get_tokens(self):
            return self.tokens

        async def set_tokens(self, tokens):
            self.tokens = tokens

        async def get_client_info(self):
            return self.client_info

        async def set_client_info(self, info):
            self.client_info = info

    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    data = tmp_path / "data"
    data.mkdir()
    # Lenient: the SDK asks for every scope the metadata lists (admin too) and takes what it is given.
    with OidcProvider(resource, log_dir=tmp_path, lenient_scopes=True) as op:
        server = start_server(data, port, oauth_config(resource, op.issuer))
        try:
            auth = ClientCredentialsOAuthProvider(server_url=server.url, storage=Memory(), client_id="alice",
                                                  client_secret="alice-secret", issuer=op.issuer)
            async with httpx.AsyncClient(auth=auth, timeout=httpx.Timeout(30, read=120)) as http:
                async with Client(streamable_http_client(server.url, http_client=http)) as client:
                    tools = await client.list_tools()
                    assert "execute_code" in [t.name for t in tools.tools]
                    await client.call_tool("write_workspace_file", {"filename": "n.txt", "content": "41"})
                    answer = await client.call_tool("execute_code", {"code": "result = int(read_file('n.txt')) + 1"})
                    assert answer.structured_content.get("result") == 42, answer.structured_content["error"][:3000]
            granted = set(auth.context.current_tokens.scope.split())
            assert "execute" in granted and "admin" not in granted
            # Alice's file is in alice's tenant, not in the local one.
            tenants = list((data / "tenants").iterdir())
            assert [t.name.startswith("oidc-alice-") for t in tenants] == [True]
            assert (tenants[0] / "workspace" / "n.txt").read_text() == "41"
            assert not (data / "workspace" / "n.txt").exists()
        finally:
            server.stop()


def test_bad_tokens_get_the_specs_answers(idp, tmp_path: Path):
    op, server = idp
    good = op.token("alice")
    assert post(server.url, initialize(), good).status_code == 200

    def refused(token: str, why: str) -> None:
        r = post(server.url, initialize(), token)
        assert r.status_code == 401, (why, r.status_code, r.text)
        params = challenge(r)
        assert params["error"] == "invalid_token", (why, params)
        assert params["resource_metadata"].endswith("/.well-known/oauth-protected-resource/mcp")
        assert r.json()["error"] == "invalid_token"
        return params["error_description"]

    # Expired: the provider's shortlived client gets 2-second tokens (the server's leeway is 0).
    short = op.token("shortlived")
    assert post(server.url, initialize(), short).status_code == 200
    time.sleep(3.2)
    assert "expired" in refused(short, "expired")
    # Issued for another resource (RFC 8707 audience binding).
    assert "another resource" in refused(op.token("alice", resource=OTHER_RESOURCE), "audience")
    # Issued by another provider (same resource, its own keys).
    with OidcProvider(server.url, log_dir=tmp_path / "other") as other:
        assert "trusts only" in refused(other.token("alice"), "issuer")
    head, payload, sig = good.split(".")
    # A signature changed in the middle; and claims changed under the original signature.
    flipped = sig[:10] + ("A" if sig[10] != "A" else "B") + sig[11:]
    refused(f"{head}.{payload}.{flipped}", "signature")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    claims["sub"] = "bob"
    tampered = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    assert "signature" in refused(f"{head}.{tampered}.{sig}", "tampered claims")
    # alg=none is never accepted.
    none_head = base64.urlsafe_b64encode(json.dumps({"alg": "none", "typ": "JWT"}).encode()).decode().rstrip("=")
    refused(f"{none_head}.{payload}.", "alg none")
    # Not a token at all.
    refused("not-a-jwt", "garbage")
    # No token: a bare challenge pointing at the metadata.
    r = post(server.url, initialize())
    assert r.status_code == 401 and "error" not in challenge(r)


def test_missing_scope_is_403_insufficient_scope(idp):
    op, server = idp
    reader = op.token("reader")
    # Any valid token may list; tools/call needs the tool's scope.
    assert post(server.url, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, reader).status_code == 200
    ok = post(server.url, call("search_tools", {"query": "files"}), reader)
    assert ok.status_code == 200, ok.text
    for tool, scope in [("execute_code", "execute"), ("write_workspace_file", "workspace:write"),
                        ("save_skill", "skills:write"), ("read_workspace_file", "workspace:read")]:
        r = post(server.url, call(tool, {"code": "result = 1"}), reader)
        assert r.status_code == 403, (tool, r.text)
        params = challenge(r)
        assert params["error"] == "insufficient_scope" and params["scope"] == scope, params
        assert "resource_metadata" in params
    # A token with execute but not skills:write.
    runner = op.token("alice", scope="execute tools:read")
    assert post(server.url, call("execute_code", {"code": "result = 1"}), runner).status_code == 200
    assert post(server.url, call("save_skill", {"name": "x", "code": "pass"}), runner).status_code == 403


def test_key_rotation_at_the_provider_is_picked_up(idp):
    op, server = idp
    old = op.token("alice")
    assert post(server.url, initialize(), old).status_code == 200
    # The provider rotates to a new key (and a new algorithm): ES256, kid k2.
    op.restart("ES256", "k2")
    new = op.token("alice")
    assert json.loads(base64.urlsafe_b64decode(new.split(".")[0] + "=="))["kid"] == "k2"
    r = post(server.url, initialize(), new)
    assert r.status_code == 200, r.text
    # The old key is gone from the provider's set, so tokens it signed are refused now.
    r = post(server.url, initialize(), old)
    assert r.status_code == 401 and "does not publish" in challenge(r)["error_description"]


def test_made_up_key_ids_cannot_hold_a_rotated_keys_token(idp):
    """Issue 57: tokens naming key ids nobody published (an accepted alg and the issuer's name, no
    signature) each took the key-fetch lock in turn, and held a real token of a just-rotated key
    for about 2 s apiece (80 s behind 40). Now they share one fetch with it, or are answered from it."""
    op, server = idp
    assert post(server.url, initialize(), op.token("alice")).status_code == 200
    op.restart("ES256", "k-rotated")
    real = op.token("alice")

    def b64(obj: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    garbage = [f"{b64({'alg': 'ES256', 'typ': 'JWT', 'kid': f'made-up-{i}'})}."
               f"{b64({'iss': op.issuer, 'sub': 'mallory'})}.{b64({'not': 'a signature'})}" for i in range(40)]
    with ThreadPoolExecutor(max_workers=41) as pool:
        flood = [pool.submit(post, server.url, initialize(), t) for t in garbage]
        time.sleep(0.2)  # the real token comes after the flood, where the old queue put it last
        started = time.monotonic()
        r = pool.submit(post, server.url, initialize(), real).result()
        took = time.monotonic() - started
        refused = [f.result() for f in flood]
    assert r.status_code == 200, r.text
    # Generous: it takes well under a second; behind the old queue it took a minute or more.
    assert took < 10, took
    for a in refused:
        assert a.status_code == 401 and "does not publish" in challenge(a)["error_description"], a.text


def test_doctor_checks_the_identity_provider(tmp_path: Path):
    resource = f"http://127.0.0.1:{free_port()}/mcp"
    cfg = tmp_path / "config.json"
    with OidcProvider(resource, log_dir=tmp_path, kid="doctor-key") as op:
        cfg.write_text(json.dumps(oauth_config(resource, op.issuer)))
        ok = run_cli("--data-dir", str(tmp_path / "d"), "--config", str(cfg), "doctor", "--json", timeout=120)
        auth = next(c for c in json.loads(ok.stdout)["checks"] if c["check"] == "auth")
        assert auth["status"] == "ok" and "doctor-key" in auth["detail"] and op.issuer in auth["detail"], auth
    # The provider is gone: doctor fails and says which issuer it could not reach.
    bad = run_cli("--data-dir", str(tmp_path / "d"), "--config", str(cfg), "doctor", "--json", timeout=120)
    auth = next(c for c in json.loads(bad.stdout)["checks"] if c["check"] == "auth")
    assert bad.returncode == 1 and auth["status"] == "fail" and op.issuer in auth["detail"], auth


# --- tenants ------------------------------------------------------------------------------------


async def test_two_principals_never_see_each_others_data(idp):
    op, server = idp
    alice, bob = op.token("alice"), op.token("bob")

    async def leave_traces(token: str, who: str) -> str:
        async with bearer_client(server.url, token) as c:
            await c.call_tool("write_workspace_file", {"filename": "secret.txt", "content": f"{who}'s secret"})
            saved = await c.call_tool("save_skill", {"name": f"{who}_skill", "code": f"def run():\n    return '{who}'\n",
                                                     "description": f"{who}'s own skill"})
            assert not saved.is_error, saved.structured_content
            ran = await c.call_tool("execute_code", {"code": f"x = '{who}'\nresult = x", "session_id": "shared-name"})
            assert ran.structured_content["result"] == who
            pii = await c.call_tool("sanitize_pii", {"text": f"mail {who}@example.com"})
            sanitized = pii.structured_content["sanitized_text"]
            assert sanitized == "mail [EMAIL_1]", sanitized
            return sanitized

    alice_pii = await leave_traces(alice, "alice")
    bob_pii = await leave_traces(bob, "bob")

    async def look_from(token: str, me: str, other: str, others_pii_token: str):
        async with bearer_client(server.url, token) as c:
            read = await c.call_tool("read_workspace_file", {"filename": "secret.txt"})
            assert read.structured_content["content"] == f"{me}'s secret"
            listing = await c.call_tool("list_workspace_files", {})
            assert other not in json.dumps(listing.structured_content)
            skills = await c.call_tool("list_skills", {})
            names = json.dumps(skills.structured_content)
            assert f"{me}_skill" in names and f"{other}_skill" not in names
            load = await c.call_tool("load_skill", {"name": f"{other}_skill"})
            assert load.is_error
            found = await c.call_tool("search_tools", {"query": f"{other}'s own skill"})
            assert f"{other}_skill" not in json.dumps(found.structured_content)
            # The same session_id names this principal's own interpreter.
            ran = await c.call_tool("execute_code", {"code": "result = x", "session_id": "shared-name"})
            assert ran.structured_content["result"] == me, ran.structured_content
            # Code sees only this tenant's workspace and skills.
            ran = await c.call_tool("execute_code", {"code": "import os\nresult = sorted(os.listdir('.')), sorted(os.listdir('/skills'))"})
            assert other not in json.dumps(ran.structured_content["result"]), ran.structured_content
            # The other's vault token does not restore here.
            restored = await c.call_tool("restore_pii", {"text": others_pii_token})
            assert restored.structured_content["restored_text"] == f"mail {me}@example.com", restored.structured_content

    await look_from(bob, "bob", "alice", alice_pii)
    await look_from(alice, "alice", "bob", bob_pii)

    # A stateful session begun by alice is unknown to bob, even with its id.
    r = post(server.url, initialize(), alice)
    sid = r.headers["mcp-session-id"]
    listing = {"jsonrpc": "2.0", "id": 5, "method": "tools/list"}
    as_bob = post(server.url, listing, bob, **{"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"})
    assert as_bob.status_code == 404, as_bob.text
    as_alice = post(server.url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, alice,
                    **{"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"})
    assert as_alice.status_code in (200, 202), as_alice.text
    # Each tenant's audit trail holds its own executions only.
    tenants = {t.name.split("-")[1]: t for t in (server_data(server) / "tenants").iterdir()}
    alice_audit = (tenants["alice"] / "audit" / "audit.jsonl").read_text()
    assert "execution" in alice_audit
    assert sum(1 for line in alice_audit.splitlines() if '"execution"' in line) == 3


def server_data(server: HttpServer) -> Path:
    return Path(server.proc.args[2])  # [BIN, '--data-dir', DIR, ...]


# --- quotas -------------------------------------------------------------------------------------


QUOTAS = {"concurrent_executions": 1, "executions_per_minute": 4, "workspace_bytes": 4096, "sessions": 1,
          "requests_per_minute": 30}
TOKENS = {name: f"{name}-token-0123456789abcdef" for name in ("p1", "p2", "p3")}


@pytest.fixture
def limited(tmp_path: Path):
    data = tmp_path / "data"
    data.mkdir()
    server = start_server(data, free_port(), {"auth": {"tokens": TOKENS}, "quotas": QUOTAS})
    yield server
    server.stop()


async def test_execution_quotas(limited: HttpServer):
    async with bearer_client(limited.url, TOKENS["p1"]) as c:
        slow = {"code": "import time\ntime.sleep(2)\nresult = 'done'"}
        both = await asyncio.gather(c.call_tool("execute_code", slow), c.call_tool("execute_code", slow))
        errors = [a.structured_content["error"] for a in both if a.is_error]
        assert len(errors) == 1, [a.structured_content for a in both]
        assert "quotas.concurrent_executions = 1" in errors[0] and "retry" in errors[0]
        # The refused one did not start, so three more fit in the minute.
        for _ in range(3):
            ok = await c.call_tool("execute_code", {"code": "result = 1"})
            assert not ok.is_error, ok.structured_content
        over = await c.call_tool("execute_code", {"code": "result = 1"})
        assert over.is_error
        assert re.search(r"quotas\.executions_per_minute = 4\); retry in \d+ s", over.structured_content["error"])
    # Another principal's quota is untouched.
    async with bearer_client(limited.url, TOKENS["p2"]) as c:
        assert not (await c.call_tool("execute_code", {"code": "result = 1"})).is_error


async def test_workspace_and_session_quotas(limited: HttpServer):
    async with bearer_client(limited.url, TOKENS["p2"]) as c:
        ok = await c.call_tool("write_workspace_file", {"filename": "a.txt", "content": "x" * 3000})
        assert not ok.is_error
        over = await c.call_tool("write_workspace_file", {"filename": "b.txt", "content": "y" * 2000})
        assert over.is_error and "quotas.workspace_bytes = 4096" in over.structured_content["error"]
        # Replacing a file counts what it replaces.
        assert not (await c.call_tool("write_workspace_file", {"filename": "a.txt", "content": "z" * 3500})).is_error
        # Code that keeps writing is refused (the allowance is at least 1 MiB): by the kernel, which fails the
        # write (the note names the limit), or by the watchdog, which stops the execution.
        flood = ("import time\nwith open('flood.bin', 'wb') as f:\n    for _ in range(400):\n"
                 "        f.write(b'0' * (1 << 20)); f.flush(); time.sleep(0.01)\nresult = 'wrote it all'")
        stopped = await c.call_tool("execute_code", {"code": flood, "timeout_seconds": 60})
        said = stopped.structured_content.get("error", "") + stopped.structured_content.get("note", "")
        assert stopped.is_error and "quotas.workspace_bytes" in said, stopped.structured_content
        first = await c.call_tool("execute_code", {"code": "result = 1", "session_id": "one"})
        assert not first.is_error
        # A session past the quota ends the least recently used one, which is told on its next call.
        second = await c.call_tool("execute_code", {"code": "result = 2", "session_id": "two"})
        assert not second.is_error
        again = await c.call_tool("execute_code", {"code": "result = 3", "session_id": "one"})
        assert again.is_error and "quotas.sessions = 1" in again.structured_content["error"]
        # (The call after it starts "one" afresh: test_zygote.py; this tenant's executions_per_minute is spent.)


def test_request_quota_is_429_with_retry_after(limited: HttpServer):
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    codes = [post(limited.url, listing, TOKENS["p3"]).status_code for _ in range(QUOTAS["requests_per_minute"])]
    assert codes == [200] * QUOTAS["requests_per_minute"]
    r = post(limited.url, listing, TOKENS["p3"])
    assert r.status_code == 429
    assert 1 <= int(r.headers["retry-after"]) <= 60
    assert "quotas.requests_per_minute" in r.json()["error_description"]
    # The other principals are not slowed down.
    assert post(limited.url, listing, TOKENS["p1"]).status_code == 200
