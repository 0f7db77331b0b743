"""The parts the upstream sign-in tests (issue 58) are built from, proven to work together without
our server: the upstream's authorization server (oidc-provider, `upstream_idp.UpstreamIdp`), the
protected upstream MCP server (the MCP Python SDK, `upstream_idp.ProtectedServer`), and the
person's browser (headless Chromium, `browser.sign_in`). The MCP client is the Python SDK.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import time
from pathlib import Path

import anyio
import httpx2 as httpx
import pytest
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

import browser
from upstream_idp import (OTHER_RESOURCE, PREREGISTERED, Callback, ProtectedServer, UpstreamIdp, free_port, pkce,
                          token_hash)

ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}


class Upstream:
    """The pair a test gets: the IdP and the protected server whose resource it issues tokens for."""

    def __init__(self, idp: UpstreamIdp, server: ProtectedServer):
        self.idp, self.server = idp, server


def start_upstream(tmp_path: Path, **idp_args) -> tuple[UpstreamIdp, ProtectedServer]:
    port = free_port()
    idp = UpstreamIdp(f"http://127.0.0.1:{port}/mcp", log_dir=tmp_path, **idp_args).start()
    try:
        server = ProtectedServer(idp.issuer, port=port, log_dir=tmp_path).start()
    except BaseException:
        idp.stop()
        raise
    return idp, server


@pytest.fixture
def upstream(tmp_path: Path):
    idp, server = start_upstream(tmp_path)
    try:
        yield Upstream(idp, server)
    finally:
        server.stop()
        idp.stop()


def claims(jwt: str) -> dict:
    payload = jwt.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


async def _call(url: str, token: str, tool: str, args: dict | None, sse: bool):
    if sse:
        async with Client(sse_client(url, headers={"Authorization": f"Bearer {token}"})) as client:
            return await client.call_tool(tool, args or {})
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            return await client.call_tool(tool, args or {})


def call(url: str, token: str, tool: str, args: dict | None = None, *, sse: bool = False) -> dict:
    """A tool call through the MCP Python SDK client with the bearer token; its structured content."""
    result = anyio.run(_call, url, token, tool, args, sse)
    assert not result.is_error, result.content
    return result.structured_content


def raw_initialize(url: str, token: str | None) -> httpx.Response:
    headers = {**ACCEPT, **({"Authorization": f"Bearer {token}"} if token else {})}
    return httpx.post(url, json=INITIALIZE, headers=headers, timeout=10)


def test_unauthenticated_request_is_told_where_to_sign_in(upstream):
    r = raw_initialize(upstream.server.url, None)
    assert r.status_code == 401, r.text
    challenge = r.headers["www-authenticate"]
    assert challenge.startswith("Bearer "), challenge
    m = re.search(r'resource_metadata="([^"]+)"', challenge)
    assert m, challenge
    port = upstream.server.port
    assert m.group(1) == f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp"

    prm = httpx.get(m.group(1), timeout=10).json()
    assert prm["resource"] == upstream.server.url == f"http://127.0.0.1:{port}/mcp"
    assert prm["authorization_servers"] == [upstream.idp.issuer]

    meta = upstream.idp.metadata()
    assert meta["issuer"] == upstream.idp.issuer
    assert meta["code_challenge_methods_supported"] == ["S256"]
    assert meta["authorization_response_iss_parameter_supported"] is True
    assert meta["client_id_metadata_document_supported"] is True
    assert set(meta["grant_types_supported"]) == {"authorization_code", "refresh_token"}
    for endpoint in ("registration_endpoint", "revocation_endpoint", "introspection_endpoint"):
        assert meta[endpoint].startswith(upstream.idp.issuer + "/"), (endpoint, meta)
    assert {"orders:read", "orders:write", "offline_access"} <= set(meta["scopes_supported"])

    [logged] = [e for e in upstream.server.events("request") if e["path"] == "/mcp"]
    assert (logged["status"], logged["sub"], logged["token"], logged["rpc"]) == (401, None, None, "initialize")


def test_two_people_sign_in_and_each_is_themselves(upstream):
    idp, server = upstream.idp, upstream.server
    seen = {}
    for person in ("alice", "bob"):
        with Callback() as cb:
            client = idp.register([cb.url])
            assert "client_secret" not in client  # a public client (token_endpoint_auth_method none)
            verifier, challenge = pkce()
            state = secrets.token_urlsafe(12)
            url = idp.authorization_url(client["client_id"], cb.url, challenge, state=state,
                                        scope="orders:read orders:write offline_access")
            page = browser.sign_in(url, person)
            back = cb.wait()
            assert page.url.startswith(cb.url + "?"), page
            assert back["state"] == state and back["iss"] == idp.issuer and back["code"], back
            tokens = idp.exchange_code(client["client_id"], back["code"], cb.url, verifier)
        assert tokens["token_type"] == "Bearer" and tokens["refresh_token"], tokens
        at = claims(tokens["access_token"])
        assert (at["sub"], at["aud"], at["iss"]) == (person, server.url, idp.issuer), at
        assert at["scope"] == "orders:read orders:write"

        me = call(server.url, tokens["access_token"], "whoami")
        assert me == {"sub": person, "scopes": ["orders:read", "orders:write"], "client_id": client["client_id"]}
        seen[person] = call(server.url, tokens["access_token"], "list_orders", {"limit": 2})
        logged = [e for e in server.events("request") if e["token"] == token_hash(tokens["access_token"])]
        assert logged and {e["sub"] for e in logged} == {person}, logged
        assert "tools/call" in {e["rpc"] for e in logged} and "whoami" in {e["tool"] for e in logged}
    assert [o["id"] for o in seen["alice"]["orders"]] == ["A-1001", "A-1002"]
    assert [o["id"] for o in seen["bob"]["orders"]] == ["B-2001", "B-2002"]
    issued = idp.events("token_issued")
    assert [(e["grant_type"], e["sub"]) for e in issued] == [("authorization_code", "alice"),
                                                              ("authorization_code", "bob")]


def test_refresh_rotates_and_a_spent_refresh_token_is_refused(upstream):
    idp = upstream.idp
    first = idp.sign_in("carol")
    r = idp.refresh(first["client_id"], first["refresh_token"])
    assert r.status_code == 200, r.text
    second = r.json()
    assert second["refresh_token"] != first["refresh_token"]
    assert call(upstream.server.url, second["access_token"], "whoami")["sub"] == "carol"

    reused = idp.refresh(first["client_id"], first["refresh_token"])
    assert reused.status_code == 400 and reused.json()["error"] == "invalid_grant", reused.text

    spent = [e for e in idp.events("token_issued") if e["grant_type"] == "refresh_token"]
    assert [(e["refresh_spent"], e["refresh_issued"], e["sub"]) for e in spent] == [
        (token_hash(first["refresh_token"]), token_hash(second["refresh_token"]), "carol")]
    [rejected] = idp.events("refresh_rejected")
    assert rejected["refresh_spent"] == token_hash(first["refresh_token"])
    assert rejected["error"] == "invalid_grant"
    assert first["refresh_token"] not in idp.event_log.read_text()  # only hashes are logged
    # Reuse ends the sign-in (oidc-provider revokes the grant): the newest refresh token too.
    after = idp.refresh(first["client_id"], second["refresh_token"])
    assert after.status_code == 400 and after.json()["error"] == "invalid_grant", after.text
    assert idp.events("grant_revoked")


def test_a_token_for_another_audience_is_refused(upstream):
    idp, server = upstream.idp, upstream.server
    other = idp.sign_in("alice", resource=OTHER_RESOURCE)
    assert claims(other["access_token"])["aud"] == OTHER_RESOURCE
    assert claims(other["access_token"])["sub"] == "alice"
    r = raw_initialize(server.url, other["access_token"])
    assert r.status_code == 401, r.text
    assert 'error="invalid_token"' in r.headers["www-authenticate"]

    # Refreshing it for this server is refused too: the grant is for the other resource (RFC 8707).
    widened = idp.refresh(other["client_id"], other["refresh_token"], resource=server.url)
    assert widened.status_code == 400 and widened.json()["error"] == "invalid_target", widened.text

    # The same person's token for this server is accepted,
    mine = idp.sign_in("alice", scope="orders:read")["access_token"]
    assert raw_initialize(server.url, mine).status_code == 200
    # and a forged one (its claims, the other token's signature) is not.
    good = mine.split(".")
    forged = ".".join([good[0], good[1], other["access_token"].split(".")[2]])
    assert raw_initialize(server.url, forged).status_code == 401


def test_an_expired_token_is_refused(tmp_path):
    idp, server = start_upstream(tmp_path, access_ttl=1)
    try:
        tokens = idp.sign_in("alice", scope="orders:read")
        exp = claims(tokens["access_token"])["exp"]
        time.sleep(max(exp + 1 - time.time(), 0))  # time passing is the point, not a synchronisation
        r = raw_initialize(server.url, tokens["access_token"])
        assert r.status_code == 401, r.text
    finally:
        server.stop()
        idp.stop()


def test_declined_consent_comes_back_as_access_denied(upstream):
    idp = upstream.idp
    with Callback() as cb:
        client = idp.register([cb.url])
        _, challenge = pkce()
        url = idp.authorization_url(client["client_id"], cb.url, challenge, state="st-decline")
        page = browser.sign_in(url, "alice", consent=False)
        back = cb.wait()
    assert back["error"] == "access_denied", back
    assert back["state"] == "st-decline" and back["iss"] == idp.issuer
    assert "code" not in back
    assert page.query["error"] == "access_denied"
    assert not idp.events("token_issued")


def test_a_revoked_refresh_token_is_dead(upstream):
    idp = upstream.idp
    tokens = idp.sign_in("bob")
    assert idp.introspect(tokens["refresh_token"], tokens["client_id"])["active"] is True
    r = idp.revoke(tokens["refresh_token"], tokens["client_id"])
    assert r.status_code == 200, r.text
    refused = idp.refresh(tokens["client_id"], tokens["refresh_token"])
    assert refused.status_code == 400 and refused.json()["error"] == "invalid_grant", refused.text
    assert idp.introspect(tokens["refresh_token"], tokens["client_id"])["active"] is False
    [revoked] = idp.events("revocation")
    assert (revoked["token"], revoked["kind"], revoked["status"]) == (token_hash(tokens["refresh_token"]),
                                                                      "RefreshToken", 200)


def test_cancel_order_without_orders_write_is_403_insufficient_scope(upstream):
    idp, server = upstream.idp, upstream.server
    reader = idp.sign_in("alice", scope="orders:read offline_access")
    assert call(server.url, reader["access_token"], "whoami")["scopes"] == ["orders:read"]

    auth = {**ACCEPT, "Authorization": f"Bearer {reader['access_token']}"}
    init = httpx.post(server.url, json=INITIALIZE, headers=auth, timeout=10)
    assert init.status_code == 200, init.text
    session = {"mcp-session-id": init.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
    httpx.post(server.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
               headers={**auth, **session}, timeout=10)
    cancel = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
              "params": {"name": "cancel_order", "arguments": {"order_id": "A-1001"}}}
    r = httpx.post(server.url, json=cancel, headers={**auth, **session}, timeout=10)
    assert r.status_code == 403, r.text
    challenge = r.headers["www-authenticate"]
    assert challenge.startswith("Bearer ") and 'error="insufficient_scope"' in challenge, challenge
    assert 'scope="orders:write"' in challenge, challenge
    assert f'resource_metadata="{server.resource_metadata}"' in challenge, challenge
    [denied] = [e for e in server.events("request") if e["tool"] == "cancel_order"]
    assert (denied["status"], denied["sub"]) == (403, "alice")

    writer = idp.sign_in("alice", scope="orders:read orders:write")
    assert call(server.url, writer["access_token"], "cancel_order", {"order_id": "A-1001"}) == {
        "sub": "alice", "cancelled": "A-1001"}
    orders = call(server.url, writer["access_token"], "list_orders")["orders"]
    assert [(o["id"], o["cancelled"]) for o in orders] == [("A-1001", True), ("A-1002", False), ("A-1003", False)]


def test_the_preregistered_client_signs_in(tmp_path):
    port = free_port()
    with Callback() as cb, \
            UpstreamIdp(f"http://127.0.0.1:{port}/mcp", redirect_uris=[cb.url], log_dir=tmp_path) as idp, \
            ProtectedServer(idp.issuer, port=port, log_dir=tmp_path) as server:
        client_id, secret = PREREGISTERED
        tokens = idp.sign_in("dave", client={"client_id": client_id, "client_secret": secret}, callback=cb)
        assert call(server.url, tokens["access_token"], "whoami")["client_id"] == "preregistered"
        # Its secret is checked.
        wrong = idp.refresh(client_id, tokens["refresh_token"], client_secret="not-the-secret")
        assert wrong.status_code == 401 and wrong.json()["error"] == "invalid_client", wrong.text


def test_a_client_id_metadata_document_is_a_client(upstream):
    idp = upstream.idp
    with Callback() as cb:
        client_id = f"https://127.0.0.1:{cb.port}/client.json"
        cb.documents["/client.json"] = {"client_id": client_id, "client_name": "cimd client",
                                        "redirect_uris": [cb.url], "token_endpoint_auth_method": "none",
                                        "grant_types": ["authorization_code", "refresh_token"],
                                        "response_types": ["code"], "application_type": "native"}
        tokens = idp.sign_in("erin", client={"client_id": client_id})
        assert cb.fetched and cb.fetched[0] == "/client.json"
    assert call(upstream.server.url, tokens["access_token"], "whoami")["client_id"] == client_id
    assert any(e["url"] == client_id and e["status"] == 200 for e in idp.events("metadata_document_fetched"))
    assert not idp.events("client_registered")


def test_legacy_sse_takes_the_same_tokens(upstream):
    tokens = upstream.idp.sign_in("frank", scope="orders:read")
    assert call(upstream.server.sse_url, tokens["access_token"], "whoami", sse=True)["sub"] == "frank"
    r = httpx.get(upstream.server.sse_url, timeout=10)
    assert r.status_code == 401 and "resource_metadata=" in r.headers["www-authenticate"]


def test_an_unreachable_provider_comes_back_with_its_state(upstream):
    idp = upstream.idp
    tokens = idp.sign_in("gina")
    with idp.unreachable():
        with pytest.raises(httpx.ConnectError):
            idp.refresh(tokens["client_id"], tokens["refresh_token"])
    with idp.unreachable("hang"):
        # (Not a refresh: the paused provider would still serve it once resumed, spending the token.)
        with pytest.raises(httpx.TimeoutException):
            httpx.get(f"{idp.issuer}/.well-known/oauth-authorization-server", timeout=1)
    # Back: the client, the grant and the refresh token survived the outage.
    r = idp.refresh(tokens["client_id"], tokens["refresh_token"])
    assert r.status_code == 200, r.text
    assert call(upstream.server.url, r.json()["access_token"], "whoami")["sub"] == "gina"
