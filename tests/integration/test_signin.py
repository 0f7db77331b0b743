"""Each person signs in to an upstream that asks for it (issue 58), with real parts only.

The upstream is the MCP Python SDK's server requiring bearer tokens (servers/protected_server.py),
its authorization server panva's oidc-provider (servers/upstream_idp.mjs: authorization code + PKCE,
dynamic registration, refresh rotation, revocation), the person's browser headless Chromium
(browser.py), and the agent's client the MCP Python SDK answering URL elicitation by handing the
link to that browser. Nothing here fakes a step of the flow.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.parse
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import httpx2 as httpx
import pytest
from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client

import browser
from cluster import Postgres
from conftest import BIN, run_cli, start_http
from upstream_idp import KeyedServer, ProtectedServer, UpstreamIdp, free_port

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


KEY = "7f" * 32
TOKENS = {"alice": "alice-token-0123456789abcdef", "bob": "bob-token-0123456789abcdef"}
WHOAMI = "from servers import orders\nresult = orders.whoami()"


@contextmanager
def upstream(tmp_path: Path, **idp_args):
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    with UpstreamIdp(resource, log_dir=tmp_path, **idp_args) as idp, \
            ProtectedServer(idp.issuer, port=port, log_dir=tmp_path) as mcp:
        yield idp, mcp


def write_config(tmp_path: Path, mcp: ProtectedServer, **extra) -> Path:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"mcpServers": {"orders": {"url": mcp.url}}, **extra}))
    return config


def cli(data: Path, config: Path, *args: str, env: dict | None = None, timeout: float = 60):
    return run_cli("--data-dir", str(data), "--config", str(config), *args, env=env, timeout=timeout)


def login_in_browser(data: Path, config: Path, person: str, *, consent: bool = True, extra=(), env_extra=None):
    """`auth login orders`, with `person` signing in in the browser; gives the command's outcome and the
    link it printed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODE_EXECUTION_MCP_")}
    env.update(env_extra or {})
    proc = subprocess.Popen([str(BIN), "--data-dir", str(data), "--config", str(config), "auth", "login", "orders",
                             "--no-browser", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, stdin=subprocess.DEVNULL)
    seen, link = [], None
    deadline = time.monotonic() + 30
    while link is None and time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        m = re.search(r"^\s+(http://127\.0\.0\.1:\d+/auth\?\S+)$", line)
        link = m.group(1) if m else None
    assert link, "".join(seen)
    page = browser.sign_in(link, person, consent=consent)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, "".join(seen) + err, link, page


def secrets_of(link: str, page: browser.SignIn) -> list[str]:
    """What must appear nowhere: the state and the code of a sign-in."""
    state = urllib.parse.parse_qs(urllib.parse.urlsplit(link).query)["state"][0]
    return [state] + ([page.query["code"]] if page.query.get("code") else [])


# The access tokens are JWTs (RFC 9068): a JWT's first bytes, anywhere, is a token that leaked.
JWT = re.compile(rb"eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.")


def grep_tree(root: Path, needles: list[str]) -> list[str]:
    """Files under `root` whose bytes hold one of `needles` (plain text). The workspace's disk image
    is left out (sparse and huge); the workspace's files are searched through its mount."""
    hits = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink() and path.stat().st_size < 64 << 20:
            try:
                data = path.read_bytes()
            except OSError:
                continue
            hits += [f"{path}: {n[:12]}…" for n in needles if n.encode() in data]
            if JWT.search(data):
                hits.append(f"{path}: a JWT")
    return hits


def test_a_person_signs_in_from_the_shell_their_code_acts_as_them_and_logout_revokes(tmp_path: Path):
    with upstream(tmp_path) as (idp, mcp):
        config = write_config(tmp_path, mcp)
        data = tmp_path / "data"
        # Before signing in, code is told what to do, not that the server is broken.
        before = json.loads(cli(data, config, "exec", WHOAMI).stdout)
        assert not before["success"] and "auth login orders" in before["error"], before
        rc, out, err, link, page = login_in_browser(data, config, "alice")
        assert rc == 0 and "Signed you in to 'orders'" in out, (out, err)
        assert "code_challenge_method=S256" in link and "resource=" in link, link
        answer = json.loads(cli(data, config, "exec", WHOAMI).stdout)
        assert answer["success"] and answer["result"]["sub"] == "alice", answer
        status = cli(data, config, "auth", "status", "--json")
        [held] = json.loads(status.stdout)
        assert held["server"] == "orders" and held["kind"] == "oauth" and held["refreshable"], held
        assert held["issuer"] == idp.issuer and "orders:read" in held["scopes"], held
        assert idp.events("token_issued"), idp.events()
        # Nothing the person or the model sees holds a token, the code or the state; nor does any
        # file in the data directory (credentials are sealed).
        needles = secrets_of(link, page)
        shown = out + status.stdout + status.stderr + json.dumps(answer)
        assert not [n for n in needles if n in shown] and not JWT.search(shown.encode()), shown
        assert grep_tree(data, needles) == []
        # doctor says which servers take sign-ins, with what key, and how many are kept; no secret.
        doctor = cli(data, config, "doctor", "--json", timeout=120)
        [signin] = [c for c in json.loads(doctor.stdout)["checks"] if c["check"] == "signin"]
        assert signin["status"] == "ok" and "orders (per-person)" in signin["detail"], signin
        assert "key of this server's own" in signin["detail"], signin
        assert not [n for n in needles if n in doctor.stdout] and not JWT.search(doctor.stdout.encode())
        # A team server without the operator's key is told it can sign nobody in.
        team = write_config(tmp_path, mcp, auth={"tokens": TOKENS})
        doctor = cli(data, team, "doctor", "--json", timeout=120)
        [signin] = [c for c in json.loads(doctor.stdout)["checks"] if c["check"] == "signin"]
        assert signin["status"] == "warn" and "CODE_EXECUTION_MCP_TOKEN_KEY" in signin["detail"], signin
        doctor = cli(data, team, "doctor", "--json", timeout=120, env={"CODE_EXECUTION_MCP_TOKEN_KEY": KEY})
        [signin] = [c for c in json.loads(doctor.stdout)["checks"] if c["check"] == "signin"]
        assert signin["status"] == "ok" and "fingerprint" in signin["detail"] and KEY not in doctor.stdout, signin
        # Alice's sign-in was sealed with the server's own key: under another it does not open, and says so.
        assert "0 sign-in(s) kept, 1 that do not open with this key" in signin["detail"], signin
        config = write_config(tmp_path, mcp)
        # Logout revokes at the authorization server and forgets.
        out = cli(data, config, "auth", "logout", "orders")
        assert out.returncode == 0 and "revoked" in out.stdout, (out.stdout, out.stderr)
        assert idp.events("revocation"), idp.events()
        assert json.loads(cli(data, config, "auth", "status", "--json").stdout) == []
        after = json.loads(cli(data, config, "exec", WHOAMI).stdout)
        assert not after["success"] and "sign in" in after["error"], after


def test_a_declined_consent_and_an_unreachable_provider_say_what_to_do(tmp_path: Path):
    with upstream(tmp_path) as (idp, mcp):
        config = write_config(tmp_path, mcp)
        data = tmp_path / "data"
        rc, out, err, _, page = login_in_browser(data, config, "alice", consent=False)
        assert rc != 0 and "declined (access_denied)" in err, (out, err)
        assert "declined" in page.text, page.text
        assert json.loads(cli(data, config, "auth", "status", "--json").stdout) == []
        with idp.unreachable("refused"):
            failed = cli(data, config, "auth", "login", "orders", "--no-browser")
        assert failed.returncode != 0, failed.stderr
        assert "authorization server of 'orders' could not be reached" in failed.stderr, failed.stderr


class TraceSink:
    """Where the server exports its spans (OTLP over HTTP): keeps each request's bytes as sent, so a
    test can look through exactly what left the host, whatever a receiver would make of it."""

    def __init__(self):
        import http.server
        import threading

        self.bodies: list[bytes] = []
        sink = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's naming)
                sink.bodies.append(self.rfile.read(int(self.headers.get("content-length", 0))))
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def text(self) -> str:
        return b"".join(self.bodies).decode("latin-1")


class Person:
    """A URL-elicitation callback: hands the sign-in link to `who`'s browser, like a client would."""

    def __init__(self, who: str, consent: bool = True):
        self.who, self.consent, self.links, self.pages = who, consent, [], []

    async def __call__(self, context, params):
        import asyncio

        if getattr(params, "mode", None) != "url":
            return types.ElicitResult(action="decline")
        self.links.append(params.url)
        page = await asyncio.to_thread(browser.sign_in, params.url, self.who, consent=self.consent)
        self.pages.append(page)
        return types.ElicitResult(action="accept")


@asynccontextmanager
async def person_client(url: str, token: str, person: Person, mode: str = "auto"):
    """`mode` "auto" speaks 2026-07-28 to this server (the link comes in an input_required result);
    "legacy" a 2025-11-25 session (the link comes in an elicitation/create request)."""
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                                 timeout=httpx.Timeout(30, read=180)) as http:
        async with Client(streamable_http_client(url, http_client=http), elicitation_callback=person,
                          mode=mode) as client:
            yield client


async def search(client: Client, query: str) -> dict:
    answer = await client.call_tool("search_tools", {"query": query, "detail_level": "summary"})
    return answer.structured_content


async def run(client: Client, code: str) -> dict:
    answer = await client.call_tool("execute_code", {"code": code, "timeout_seconds": 120})
    return answer.structured_content


async def test_two_people_over_http_each_sign_in_through_their_client_and_act_as_themselves(tmp_path: Path):
    with upstream(tmp_path, access_ttl=32) as (idp, mcp):
        config = write_config(tmp_path, mcp, auth={"tokens": TOKENS})
        data = tmp_path / "data"
        data.mkdir()
        # A team server keeps nobody's credentials without the operator's key.
        keyless = start_http(data, config=config)
        try:
            alice = Person("alice")
            async with person_client(keyless.url, TOKENS["alice"], alice) as c:
                refused = await run(c, WHOAMI)
            assert not refused["success"] and "CODE_EXECUTION_MCP_TOKEN_KEY" in refused["error"], refused
        finally:
            keyless.stop()
        sink = TraceSink()
        server = start_http(data, "--otlp-endpoint", sink.url, config=config,
                            env={"CODE_EXECUTION_MCP_TOKEN_KEY": KEY, "CODE_EXECUTION_MCP_LOG": "debug",
                                 "OTEL_BSP_SCHEDULE_DELAY": "100"})
        try:
            alice, bob = Person("alice"), Person("bob")
            async with person_client(server.url, TOKENS["alice"], alice) as c:
                assert c.protocol_version == "2026-07-28", c.protocol_version
                mine = await run(c, WHOAMI)
            assert mine["success"] and mine["result"]["sub"] == "alice", mine
            assert len(alice.links) == 1 and "Signed in" in alice.pages[0].text, alice.pages
            # Bob's client speaks a 2025-11-25 session: the link comes as an elicitation request.
            async with person_client(server.url, TOKENS["bob"], bob, mode="legacy") as c:
                assert c.protocol_version == "2025-11-25", c.protocol_version
                theirs = await run(c, WHOAMI)
                assert theirs["success"] and theirs["result"]["sub"] == "bob", theirs
                # Short-lived tokens are refreshed in the middle of a loop without a failed call.
                loop = await run(c, "import time\nfrom servers import orders\nseen = []\n"
                                    "for i in range(6):\n    seen.append(orders.whoami()['sub'])\n"
                                    "    time.sleep(1.5)\nresult = seen")
            assert loop["success"] and loop["result"] == ["bob"] * 6, loop
            assert len(bob.links) == 1, "signed in once; refreshes ask nobody"
            # Alice again: no second sign-in, her own token.
            async with person_client(server.url, TOKENS["alice"], alice) as c:
                again = await run(c, WHOAMI)
            assert again["success"] and again["result"]["sub"] == "alice" and len(alice.links) == 1, again
            # What her code can see of its own sandbox (environment, files) holds nothing of a sign-in.
            async with person_client(server.url, TOKENS["alice"], alice) as c:
                seen = await run(c, "import os, json\nfiles = {}\n"
                                    "for root in ('/workspace', '/tmp', '/servers'):\n"
                                    "    for d, _, names in os.walk(root):\n"
                                    "        for n in names:\n"
                                    "            try:\n"
                                    "                files[os.path.join(d, n)] = open(os.path.join(d, n), 'rb').read(1 << 20).decode('latin-1')\n"
                                    "            except OSError:\n"
                                    "                pass\n"
                                    "result = json.dumps({'env': dict(os.environ), 'files': files})")
            assert seen["success"], seen
            sandbox_view = seen["result"]
        finally:
            server.stop()
        refreshes = [e for e in idp.events("token_issued") if e["grant_type"] == "refresh_token"]
        # Bob's loop ran past his token's expiry (refreshed 30 s before it); Alice's last run too.
        assert len(refreshes) >= 2, refreshes
        spent = [e["refresh_spent"] for e in refreshes]
        assert len(spent) == len(set(spent)), "a refresh token was spent twice"
        assert idp.events("refresh_rejected") == []
        # The upstream saw each person with their own tokens only.
        requests = [e for e in mcp.events("request") if e.get("sub")]
        by_person = {}
        for e in requests:
            by_person.setdefault(e["sub"], set()).add(e["token"])
        assert set(by_person) == {"alice", "bob"}, by_person
        assert not by_person["alice"] & by_person["bob"], "bob's code used alice's token or the other way"
        # Links, codes, states and tokens are in no log line (at debug), audit record or file of ours.
        needles = []
        for person in (alice, bob):
            for link, page in zip(person.links, person.pages):
                needles += secrets_of(link, page)
        log = server.log_text()
        assert "signed in" in log and "DEBUG" in log, log[-2000:]
        leaked = [line for line in log.splitlines() if any(n in line for n in needles) or JWT.search(line.encode())]
        assert leaked == [], leaked[:3]
        assert grep_tree(data, needles) == []
        assert not [n for n in needles if n in sandbox_view] and not JWT.search(sandbox_view.encode())
        # Nor in the spans the server exported (every batch, as sent).
        sink.close()
        spans = sink.text()
        assert "execute_code" in spans and "whoami" in spans, "the sink saw the server's spans"
        assert not [n for n in needles if n in spans] and not JWT.search(spans.encode()), "a secret in a span"
        assert KEY not in sandbox_view and "servers/orders" in sandbox_view, "the scan saw the wrappers"


async def test_code_that_needs_more_scope_asks_the_person_again_and_goes_on(tmp_path: Path):
    """Least privilege: a person signed in to read is asked again (step-up) when code calls a tool the
    upstream refuses with 403 insufficient_scope, and the call goes on with the wider token."""
    with upstream(tmp_path) as (idp, mcp):
        config = tmp_path / "config.json"
        config.write_text(json.dumps({"mcpServers": {"orders": {"url": mcp.url, "oauth": {"scopes": ["orders:read"]}}},
                                      "auth": {"tokens": TOKENS}}))
        data = tmp_path / "data"
        data.mkdir()
        server = start_http(data, config=config, env={"CODE_EXECUTION_MCP_TOKEN_KEY": KEY})
        try:
            alice = Person("alice")
            async with person_client(server.url, TOKENS["alice"], alice) as c:
                # Before she signs in, a search says how; after, her own list of its tools is searched.
                before = await search(c, "cancel an order")
                [waiting] = [u for u in before["unavailable"] if u["server"] == "orders"]
                assert "searchable once they have" in waiting["error"] and "auth login orders" in waiting["error"], waiting
                assert not [t for t in before["tools"] if t["server"] == "orders"], before
                first = await run(c, WHOAMI)
                assert first["success"] and first["result"]["sub"] == "alice", first
                assert "orders:write" not in first["result"]["scopes"], first
                found = await search(c, "cancel an order")
                assert found["tools"][0]["name"] == "cancel_order" and found["tools"][0]["server"] == "orders", found
                assert not [u for u in found.get("unavailable", []) if u["server"] == "orders"], found
                cancelled = await run(c, "from servers import orders\nresult = orders.cancel_order(order_id='A-1002')")
                assert cancelled["success"] and cancelled["result"] == {"sub": "alice", "cancelled": "A-1002"}, cancelled
                after = await run(c, WHOAMI)
            assert len(alice.links) == 2, alice.links
            assert "orders%3Awrite" in alice.links[1] or "orders:write" in alice.links[1], alice.links[1]
            assert "orders:write" in after["result"]["scopes"] and "orders:read" in after["result"]["scopes"], after
        finally:
            server.stop()
        # One call was refused for scope: the first cancel_order, with the read-only token.
        denied = [e for e in mcp.events("request") if "insufficient_scope" in (e.get("denied") or "")]
        assert len(denied) == 1 and denied[0]["sub"] == "alice" and denied[0]["tool"] == "cancel_order", denied


def test_a_person_who_leaves_is_signed_out_of_everything(tmp_path: Path):
    """By the operator (`auth logout --tenant NAME --all`), or by their static token leaving the config (the
    server signs them out at start): revoked at the provider, nothing kept."""
    with upstream(tmp_path) as (idp, mcp):
        config = write_config(tmp_path, mcp, auth={"tokens": TOKENS})
        data = tmp_path / "data"
        data.mkdir()
        env = {"CODE_EXECUTION_MCP_TOKEN_KEY": KEY}
        for who in ("alice", "bob"):
            rc, out, err, _, _ = login_in_browser(data, config, who, extra=("--tenant", who), env_extra=env)
            assert rc == 0 and f"Signed tenant token-{who} in to 'orders'" in out, (out, err)
        held = json.loads(cli(data, config, "auth", "status", "--all", "--json", env=env).stdout)
        assert sorted(h["tenant"] for h in held) == ["token-alice", "token-bob"], held
        # The local user's sign-ins are not theirs.
        assert json.loads(cli(data, config, "auth", "status", "--json", env=env).stdout) == []
        out = cli(data, config, "auth", "logout", "--tenant", "alice", "--all", env=env)
        assert out.returncode == 0 and "Signed tenant token-alice out of 'orders'" in out.stdout \
            and "revoked" in out.stdout, (out.stdout, out.stderr)
        assert len(idp.events("revocation")) == 1, idp.events()
        again = cli(data, config, "auth", "logout", "--tenant", "alice", "--all", env=env)
        assert again.returncode == 0 and "No sign-in is kept for tenant token-alice" in again.stdout, again.stdout
        neither = cli(data, config, "auth", "logout")
        assert neither.returncode == 2 and "<SERVER|--all>" in neither.stderr, neither.stderr
        # Bob's token leaves the config: the server signs him out as it starts.
        config = write_config(tmp_path, mcp, auth={"tokens": {"alice": TOKENS["alice"]}})
        server = start_http(data, config=config, env=env)
        try:
            deadline = time.monotonic() + 30
            while "signed out a tenant whose token left auth.tokens" not in server.log_text():
                assert time.monotonic() < deadline, server.log_text()[-3000:]
                time.sleep(0.2)
        finally:
            server.stop()
        assert len(idp.events("revocation")) == 2, idp.events()
        assert json.loads(cli(data, config, "auth", "status", "--all", "--json", env=env).stdout) == []


def test_a_renewal_the_provider_refuses_says_sign_in_again_and_signing_in_mends_it(tmp_path: Path):
    # Tokens live 32 s and are renewed 30 s before they end: every later use renews.
    with upstream(tmp_path, access_ttl=32) as (idp, mcp):
        config = write_config(tmp_path, mcp)
        data = tmp_path / "data"
        rc, out, err, _, _ = login_in_browser(data, config, "alice")
        assert rc == 0, (out, err)
        # The provider is reset: it knows neither the client it registered nor its grants.
        idp.restart(keep_state=False)
        time.sleep(3)
        answer = json.loads(cli(data, config, "exec", WHOAMI).stdout)
        assert not answer["success"], answer
        error = answer["error"]
        assert "needs this person to sign in (its authorization server no longer knows this server as a client)" \
            in error and "auth login orders" in error, error
        # Signing in again registers anew and mends it.
        rc, out, err, _, _ = login_in_browser(data, config, "alice")
        assert rc == 0, (out, err)
        mended = json.loads(cli(data, config, "exec", WHOAMI).stdout)
        assert mended["success"] and mended["result"]["sub"] == "alice", mended


async def test_two_nodes_on_one_store_share_a_sign_in_and_spend_each_refresh_token_once(tmp_path: Path):
    """Many nodes: alice signs in through one node, her browser comes back to the other (as a balancer may
    send it), which hands the callback to the node waiting for it; she is then signed in on both. When her
    token is due, calls on both nodes at once renew it through the store's lock, each refresh token spent
    once (the provider rotates them and ends the grant when one is spent twice)."""
    import anyio

    with upstream(tmp_path, access_ttl=32) as (idp, mcp):
        pg = Postgres.start(tmp_path)
        nodes = []
        ports = [free_port(), free_port()]
        # The browsers' way back is the second node's address: the balancer's, in a deployment.
        public = f"http://127.0.0.1:{ports[1]}"
        try:
            for name, port in zip(("node1", "node2"), ports):
                data = tmp_path / name
                data.mkdir()
                config = tmp_path / f"{name}.json"
                config.write_text(json.dumps({"mcpServers": {"orders": {"url": mcp.url}}, "store": {"url": pg.url},
                                              "auth": {"tokens": TOKENS}, "signin": {"public_url": public}}))
                nodes.append(start_http(data, "--node-url", f"http://127.0.0.1:{port}", addr=f"127.0.0.1:{port}",
                                        config=config, env={"CODE_EXECUTION_MCP_TOKEN_KEY": KEY}))
            alice = Person("alice")
            async with person_client(nodes[0].url, TOKENS["alice"], alice) as c:
                first = await run(c, WHOAMI)
            assert first["success"] and first["result"]["sub"] == "alice", first
            assert alice.pages[0].url.startswith(f"{public}/oauth/callback?") and "Signed in" in alice.pages[0].text, \
                alice.pages[0]
            # The nodes' own way in is not a browser's: no key, no callback.
            stranger = httpx.get(f"{public}/internal/oauth/callback?state=x&code=y", timeout=10)
            assert stranger.status_code == 403, stranger.text
            # A state nobody began is refused on the node it reaches, and handed to nobody.
            unknown = httpx.get(f"{public}/oauth/callback?state=nobody-began-this&code=y", timeout=10)
            assert unknown.status_code == 400, unknown.text
            # Nothing of hers is in the second node's data directory: it reads her sign-in from the store.
            assert not list((tmp_path / "node2").rglob("signin/alice/*"))
            time.sleep(3)  # her token is now due for renewal (30 s before its end)
            answers: list[dict] = []

            async def calls_on(node, n: int):
                async with person_client(node.url, TOKENS["alice"], alice) as c:
                    for _ in range(n):
                        answers.append(await run(c, WHOAMI))

            async with anyio.create_task_group() as tg:
                for node in nodes:
                    for _ in range(2):
                        tg.start_soon(calls_on, node, 2)
        finally:
            for node in nodes:
                node.stop()
            pg.stop()
        assert len(answers) == 8 and all(a["success"] and a["result"]["sub"] == "alice" for a in answers), answers
        assert len(alice.links) == 1, "signed in once, on one node"
        refreshes = [e for e in idp.events("token_issued") if e["grant_type"] == "refresh_token"]
        assert refreshes, "the token was due: some call renewed it"
        spent = [e["refresh_spent"] for e in refreshes]
        assert len(spent) == len(set(spent)), "a refresh token was spent twice"
        assert idp.events("refresh_rejected") == []


class KeyGiver:
    """A URL-elicitation callback for a server that takes API keys: the person opens the link and
    types their own key into this server's page."""

    def __init__(self, key: str):
        self.key, self.links, self.pages, self.forms = key, [], [], []

    async def __call__(self, context, params):
        import asyncio

        if getattr(params, "mode", None) != "url":
            return types.ElicitResult(action="decline")
        self.links.append(params.url)
        async with httpx.AsyncClient() as http:  # what the page says before the person types
            self.forms.append((await http.get(params.url, timeout=10)).text)
        self.pages.append(await asyncio.to_thread(browser.give_key, params.url, self.key))
        return types.ElicitResult(action="accept")


async def test_each_person_gives_their_own_api_key_on_a_page_never_through_the_model(tmp_path: Path):
    keys = {"alice": "alice-key-7d1e0c9b55aa", "bob": "bob-key-3f20c81e9077"}
    with KeyedServer(keys, log_dir=tmp_path) as keyed:
        config = tmp_path / "config.json"
        config.write_text(json.dumps({"mcpServers": {"keyed": {"url": keyed.url,
                                                               "oauth": {"api_key_header": "X-Api-Key"}}},
                                      "auth": {"tokens": TOKENS}}))
        data = tmp_path / "data"
        data.mkdir()
        server = start_http(data, config=config, env={"CODE_EXECUTION_MCP_TOKEN_KEY": KEY})
        code = "from servers import keyed\nresult = keyed.whoami()"
        try:
            givers = {who: KeyGiver(key) for who, key in keys.items()}
            for who in ("alice", "bob"):
                async with person_client(server.url, TOKENS[who], givers[who]) as c:
                    answer = await run(c, code)
                    assert answer["success"] and answer["result"] == {"owner": who}, answer
                    again = await run(c, code)
                    assert again["success"] and again["result"] == {"owner": who}, again
                giver = givers[who]
                assert len(giver.links) == 1 and "/oauth/key?state=" in giver.links[0], giver.links
                assert "Key kept" in giver.pages[0].text, giver.pages[0].text
                # The page says whose sign-in it is: a forwarded link would give someone else the key.
                assert f'<b id="whose">token-{who}</b>' in giver.forms[0], giver.forms[0]
                # Used once: the page does not take a second key.
                used = httpx.get(giver.links[0], timeout=10)
                assert used.status_code == 400 and "Key not kept" in used.text, used.text
                assert used.headers["x-frame-options"] == "DENY" and "no-store" in used.headers["cache-control"]
            # A forged answer to a key page nobody opened keeps nothing.
            forged = httpx.post(server.url.removesuffix("/mcp") + "/oauth/key",
                                data={"state": "0" * 64, "key": "mallory"}, timeout=10)
            assert forged.status_code == 400, forged.text
        finally:
            server.stop()
        # The upstream saw each person with their own key only; neither key is anywhere of ours.
        seen = {(e["owner"], e["key"]) for e in keyed.events("request") if e["owner"]}
        assert {o for o, _ in seen} == {"alice", "bob"} and len(seen) == 2, seen
        assert grep_tree(data, list(keys.values())) == []
        log = server.log_text()
        assert not [k for k in keys.values() if k in log], "a key is in the log"


async def test_a_shared_server_is_signed_in_to_once_by_the_operator_for_everyone(tmp_path: Path):
    """`"auth": "shared"`: the operator signs in once (auth login as the local user); every person's code
    then reaches the server with that one sign-in and nobody is asked."""
    with upstream(tmp_path) as (idp, mcp):
        config = tmp_path / "config.json"
        config.write_text(json.dumps({"mcpServers": {"orders": {"url": mcp.url, "auth": "shared"}},
                                      "auth": {"tokens": TOKENS}}))
        data = tmp_path / "data"
        data.mkdir()
        server = start_http(data, config=config, env={"CODE_EXECUTION_MCP_TOKEN_KEY": KEY})
        try:
            # Before the operator has: a person is told to ask them, not handed a link.
            alice = Person("alice")
            async with person_client(server.url, TOKENS["alice"], alice) as c:
                before = await run(c, WHOAMI)
            assert not before["success"] and "ask them to run `code-execution-mcp auth login orders`" in before["error"], \
                before
            assert alice.links == []
            rc, out, err, _, _ = login_in_browser(data, config, "ops", env_extra={"CODE_EXECUTION_MCP_TOKEN_KEY": KEY})
            assert rc == 0 and "Signed you in to 'orders'" in out, (out, err)
            for who in ("alice", "bob"):
                person = Person(who)
                async with person_client(server.url, TOKENS[who], person) as c:
                    answer = await run(c, WHOAMI)
                assert answer["success"] and answer["result"]["sub"] == "ops", answer
                assert person.links == [], "nobody is asked to sign in to a shared server"
        finally:
            server.stop()


async def test_a_client_registered_out_of_band_signs_in_with_its_id_and_secret(tmp_path: Path):
    """`oauth.client_id` and `client_secret`: the operator registered this server with the provider;
    no registration happens, tokens carry that client, and the secret is nowhere of ours."""
    port = free_port()
    callback = f"http://127.0.0.1:{port}/oauth/callback"
    with upstream(tmp_path, redirect_uris=[callback]) as (idp, mcp):
        secret = "preregistered-secret"
        config = tmp_path / "config.json"
        config.write_text(json.dumps({"mcpServers": {"orders": {"url": mcp.url, "oauth": {
            "client_id": "preregistered", "client_secret": "${ORDERS_CLIENT_SECRET}"}}}, "auth": {"tokens": TOKENS}}))
        data = tmp_path / "data"
        data.mkdir()
        server = start_http(data, addr=f"127.0.0.1:{port}", config=config,
                            env={"CODE_EXECUTION_MCP_TOKEN_KEY": KEY, "ORDERS_CLIENT_SECRET": secret,
                                 "CODE_EXECUTION_MCP_LOG": "debug"})
        try:
            alice = Person("alice")
            async with person_client(server.url, TOKENS["alice"], alice) as c:
                answer = await run(c, WHOAMI)
        finally:
            server.stop()
        assert answer["success"] and answer["result"]["client_id"] == "preregistered", answer
        assert alice.pages[0].url.startswith(callback), alice.pages[0].url
        assert not idp.events("client_registered"), "no dynamic registration with a client of the config"
        assert secret not in server.log_text() and grep_tree(data, [secret]) == []


async def test_this_server_is_a_client_by_its_metadata_document(tmp_path: Path):
    """signin.public_url https: the client id is this server's own document (CIMD, the 2026-07-28
    preference), which the provider fetches; nothing is registered. The tests serve plain http on
    loopback: the provider fetches https://127.0.0.1 documents as http, and the browser's way back
    (https, which this listener does not speak) is taken over http by hand, as a TLS proxy would."""
    port = free_port()
    public = f"https://127.0.0.1:{port}"

    class ThroughProxy(Person):
        async def __call__(self, context, params):
            import asyncio

            self.links.append(params.url)
            page = await asyncio.to_thread(browser.sign_in, params.url, self.who)
            assert page.url.startswith(f"{public}/oauth/callback?"), page.url
            async with httpx.AsyncClient() as http:
                back = await http.get("http://" + page.url.removeprefix("https://"), timeout=30)
            self.pages.append(back)
            return types.ElicitResult(action="accept")

    with upstream(tmp_path) as (idp, mcp):
        config = write_config(tmp_path, mcp, auth={"tokens": TOKENS}, signin={"public_url": public})
        data = tmp_path / "data"
        data.mkdir()
        server = start_http(data, addr=f"127.0.0.1:{port}", config=config, env={"CODE_EXECUTION_MCP_TOKEN_KEY": KEY})
        try:
            document = httpx.get(f"http://127.0.0.1:{port}/oauth/client.json", timeout=10).json()
            assert document["client_id"] == f"{public}/oauth/client.json", document
            assert document["redirect_uris"] == [f"{public}/oauth/callback"], document
            alice = ThroughProxy("alice")
            async with person_client(server.url, TOKENS["alice"], alice) as c:
                answer = await run(c, WHOAMI)
        finally:
            server.stop()
        assert alice.pages and alice.pages[0].status_code == 200 and "Signed in" in alice.pages[0].text
        assert answer["success"] and answer["result"]["sub"] == "alice", answer
        assert answer["result"]["client_id"] == f"{public}/oauth/client.json", answer
        fetched = idp.events("metadata_document_fetched")
        assert fetched and all(e.get("status") == 200 for e in fetched), fetched
        assert not idp.events("client_registered")


async def test_the_local_user_over_stdio_signs_in_through_a_loopback_link(tmp_path: Path):
    """The one-person path (Claude Desktop, Claude Code): an MCP client over stdio is handed the link;
    the browser comes back to a loopback listener of this server (RFC 8252); list_tool_categories says
    who must sign in where; a client without URL elicitation is told the command instead."""
    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client

    with upstream(tmp_path) as (idp, mcp):
        config = write_config(tmp_path, mcp)
        data = tmp_path / "data"
        params = StdioServerParameters(command=str(BIN), args=["--data-dir", str(data), "--config", str(config),
                                                               "serve"],
                                       env={k: v for k, v in os.environ.items() if not k.startswith("CODE_EXECUTION_MCP_")})

        async def categories(client) -> dict:
            answer = await client.call_tool("list_tool_categories", {})
            return {c["name"]: c for c in answer.structured_content["categories"]}

        # Without URL elicitation: told what to run, and no sign-in left waiting.
        async with Client(stdio_client(params)) as plain:
            told = await run(plain, WHOAMI)
            assert not told["success"] and "code-execution-mcp auth login orders" in told["error"], told
            before = (await categories(plain))["orders"]
        assert before["sign_in"]["signed_in"] is False and "auth login orders" in before["sign_in"]["how"], before
        me = Person("me")
        async with Client(stdio_client(params), elicitation_callback=me) as client:
            answer = await run(client, WHOAMI)
            after = (await categories(client))["orders"]
        assert answer["success"] and answer["result"]["sub"] == "me", answer
        assert len(me.links) == 1 and "redirect_uri=http%3A%2F%2F127.0.0.1%3A" in me.links[0], me.links
        assert me.pages[0].url.startswith("http://127.0.0.1:") and "Signed in" in me.pages[0].text, me.pages[0]
        assert after["sign_in"] == {"auth": "per-person", "signed_in": True}, after
        assert grep_tree(data, secrets_of(me.links[0], me.pages[0])) == []


def test_a_sign_in_revoked_at_the_provider_asks_for_a_new_one(tmp_path: Path):
    """The grant revoked elsewhere (the person signed out at the provider) while this server still
    holds its tokens: the next renewal is refused, and code is told to sign in again, with why."""
    with upstream(tmp_path, access_ttl=32) as (idp, mcp):
        config = write_config(tmp_path, mcp)
        data = tmp_path / "data"
        rc, out, err, _, _ = login_in_browser(data, config, "alice")
        assert rc == 0, (out, err)
        [record] = [p for p in (data / "signin").rglob("*.sealed")]
        kept = record.read_bytes()
        # Revoked at the provider (logout does that), then the held record put back as it was.
        assert cli(data, config, "auth", "logout", "orders").returncode == 0
        assert idp.events("revocation")
        record.write_bytes(kept)
        time.sleep(3)  # the access token is due: the call renews it, with the revoked refresh token
        answer = json.loads(cli(data, config, "exec", WHOAMI).stdout)
        assert not answer["success"], answer
        error = answer["error"]
        assert "needs this person to sign in (" in error and "renew" in error and "auth login orders" in error, error
        assert idp.events("refresh_rejected"), idp.events()
