"""An upstream MCP server that wants each person to sign in, and its authorization server (issue 58).

    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    with UpstreamIdp(resource, log_dir=tmp_path) as idp, \\
         ProtectedServer(idp.issuer, port=port, log_dir=tmp_path) as mcp, \\
         Callback() as cb:
        client = idp.register([cb.url])                       # RFC 7591, public native client
        verifier, challenge = pkce()
        url = idp.authorization_url(client["client_id"], cb.url, challenge, state="s1")
        browser.sign_in(url, "alice")                         # the person signs in and consents
        code = cb.wait()["code"]
        tokens = idp.exchange_code(client["client_id"], code, cb.url, verifier)
        # tokens["access_token"]: a JWT for `resource`, sub "alice"; mcp.url accepts it

`UpstreamIdp` runs servers/upstream_idp.mjs (oidc-provider; see its header for what it does),
`ProtectedServer` runs servers/protected_server.py (the MCP Python SDK's MCPServer requiring
bearer tokens) in the servers virtualenv. Both write JSON-lines event logs, read with `events()`;
tokens appear there only as `token_hash(token)`.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import secrets
import select
import shutil
import signal
import subprocess
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import httpx2 as httpx  # the HTTP client mcp 2.x is built on (the sync API of httpx)

from oidc import free_port

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
IDP_SCRIPT = HERE / "servers" / "upstream_idp.mjs"
SERVER_SCRIPT = HERE / "servers" / "protected_server.py"
KEYED_SCRIPT = HERE / "servers" / "keyed_server.py"
JS = REPO / "tests" / "js"
SERVERS_PYTHON = Path(os.environ.get("CEM_SERVERS_PYTHON", REPO / ".test-env" / "servers" / "bin" / "python"))

# A resource the IdP also issues tokens for: a token for it is one for "another audience".
OTHER_RESOURCE = "https://other.invalid/mcp"
PREREGISTERED = ("preregistered", "preregistered-secret")
# What the protected server's resource has; `offline_access` (an OpenID scope) gets a refresh token.
ALL_SCOPES = "orders:read orders:write offline_access"

__all__ = ["ALL_SCOPES", "OTHER_RESOURCE", "PREREGISTERED", "Callback", "ProtectedServer", "UpstreamIdp",
           "free_port", "pkce", "token_hash"]


def token_hash(token: str) -> str:
    """How the event logs name a token: the first 16 hex digits of its SHA-256."""
    return hashlib.sha256(token.encode()).hexdigest()[:16]


def pkce() -> tuple[str, str]:
    """A PKCE pair (RFC 7636): (code_verifier, S256 code_challenge)."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def _read_json_line(proc: subprocess.Popen, timeout: float) -> dict | None:
    """The first stdout line of `proc` as JSON, or None if it exits or stays silent for `timeout`."""
    line = b""
    deadline = time.monotonic() + timeout
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or proc.poll() is not None:
            break
        ready, _, _ = select.select([proc.stdout], [], [], min(left, 0.2))
        if ready:
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                break
            line += chunk
    try:
        return json.loads(line)
    except ValueError:
        return None


def _read_events(path: Path | None) -> list[dict]:
    if path is None or not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class _Process:
    """A child that prints one JSON line once listening; stderr goes to a file in log_dir."""

    name = "process"

    def __init__(self, log_dir: Path | None):
        self.log_dir = Path(log_dir) if log_dir is not None else Path(
            os.environ.get("TMPDIR", "/tmp")) / f"upstream-{os.getpid()}-{time.monotonic_ns()}"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        stamp = time.monotonic_ns()
        self.stderr_path = self.log_dir / f"{self.name}-{stamp}.stderr"
        self.event_log = self.log_dir / f"{self.name}-{stamp}.events.jsonl"
        self.proc: subprocess.Popen | None = None
        self.info: dict = {}

    def _command(self) -> list[str]:
        raise NotImplementedError

    def _cwd(self) -> Path | None:
        return None

    def _spawn(self, timeout: float) -> None:
        with open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(self._command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                         cwd=self._cwd())
        info = _read_json_line(self.proc, timeout)
        if info is None:
            self._kill()
            raise RuntimeError(f"{self.name} did not start: {self.stderr_text()[-4000:]}")
        self.info = info

    def _start_on_same_port(self, timeout: float = 10) -> None:
        """Starts again on the port it had; retried briefly should the old socket linger."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._spawn(60)
                return
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def stderr_text(self) -> str:
        return self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""

    def events(self, event: str | None = None) -> list[dict]:
        """The event log's records, oldest first (only those named `event` if given)."""
        return [e for e in _read_events(self.event_log) if event is None or e.get("event") == event]

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self, timeout: float = 10) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # should it be paused by unreachable("hang")
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._kill()
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                f.close()
        self.proc = None

    def __exit__(self, *exc) -> None:
        self.stop()


class UpstreamIdp(_Process):
    """The upstream's authorization server: oidc-provider via servers/upstream_idp.mjs.

    resource: the protected MCP server's URL (a list for several); tokens for OTHER_RESOURCE are
    issued too. redirect_uris: those of the pre-registered client PREREGISTERED. access_ttl,
    refresh_ttl: seconds. lenient_resource: a token request that names no resource gets the
    granted one (by default it must name it, as the MCP spec asks). Its state (signing key,
    clients, grants, refresh tokens) lives in a file under log_dir, so restart() keeps it.

    Attributes once started: issuer, port, authorization_endpoint, token_endpoint,
    registration_endpoint, revocation_endpoint, introspection_endpoint, jwks_uri.
    Events (`events()`): client_registered, authorized, authorization_failed, token_issued,
    token_rejected, refresh_rejected, revocation, grant_revoked, metadata_document_fetched.
    """

    name = "upstream-idp"

    def __init__(self, resource: str | list[str], *, redirect_uris: list[str] | tuple[str, ...] = (),
                 access_ttl: int = 600, refresh_ttl: int = 86400, port: int = 0, log_dir: Path | None = None,
                 lenient_resource: bool = False):
        super().__init__(log_dir)
        self.resources = [resource] if isinstance(resource, str) else list(resource)
        self.resource = self.resources[0]
        self.redirect_uris = list(redirect_uris)
        self.access_ttl = access_ttl
        self.refresh_ttl = refresh_ttl
        self.port = port
        self.lenient_resource = lenient_resource
        self.state_file = self.log_dir / f"{self.name}-{time.monotonic_ns()}.state.json"
        self.issuer: str | None = None

    def _command(self) -> list[str]:
        node = shutil.which("node")
        if node is None:
            raise RuntimeError("node is not on PATH; install nodejs (scripts/test does)")
        if not (JS / "node_modules" / "oidc-provider").is_dir():
            raise RuntimeError(f"oidc-provider is not installed; run `npm ci` in {JS}")
        cmd = [node, str(IDP_SCRIPT), "--port", str(self.port), "--access-ttl", str(self.access_ttl),
               "--refresh-ttl", str(self.refresh_ttl), "--log", str(self.event_log), "--state", str(self.state_file),
               "--exit-on-stdin-eof"]
        for r in self.resources:
            cmd += ["--resource", r]
        for uri in self.redirect_uris:
            cmd += ["--redirect-uri", uri]
        if self.lenient_resource:
            cmd.append("--lenient-resource")
        return cmd

    def _cwd(self) -> Path:
        return JS

    def start(self, timeout: float = 60) -> UpstreamIdp:
        self._spawn(timeout)
        for key, value in self.info.items():
            setattr(self, key, value)
        return self

    def __enter__(self) -> UpstreamIdp:
        return self.start() if self.proc is None else self

    def restart(self, *, keep_state: bool = True) -> UpstreamIdp:
        """Stops and starts on the same port (so the same issuer). With keep_state (the default) it
        still has its key, clients, grants and refresh tokens: an outage, not a reset."""
        issuer = self.issuer
        self.stop()
        if not keep_state:
            self.state_file.unlink(missing_ok=True)
        self.port = self.info["port"]
        self._start_on_same_port()
        self.issuer = self.info["issuer"]
        assert self.issuer == issuer, (self.issuer, issuer)
        return self

    @contextlib.contextmanager
    def unreachable(self, how: str = "refused") -> Iterator[None]:
        """The provider is down inside the block, back (same state) after it.

        how="refused": the process is stopped, so connections are refused at once.
        how="hang": the process is paused (SIGSTOP), so connections open and nothing answers:
        what a client's timeouts are for.
        """
        if how == "refused":
            self.stop()
            try:
                yield
            finally:
                self.port = self.info["port"]
                self._start_on_same_port()
        elif how == "hang":
            assert self.proc is not None, "not running"
            self.proc.send_signal(signal.SIGSTOP)
            try:
                yield
            finally:
                if self.proc is not None:
                    self.proc.send_signal(signal.SIGCONT)
        else:
            raise ValueError(f"how must be 'refused' or 'hang', not {how!r}")

    # --- the protocol, as a client would speak it -------------------------------------------

    def metadata(self) -> dict:
        """RFC 8414 authorization server metadata."""
        return httpx.get(f"{self.issuer}/.well-known/oauth-authorization-server", timeout=10).json()

    def jwks(self) -> dict:
        return httpx.get(self.jwks_uri, timeout=10).json()

    def register(self, redirect_uris: list[str], *, auth_method: str = "none", application_type: str = "native",
                 scope: str | None = None, client_name: str = "test client", **metadata) -> dict:
        """Dynamic Client Registration (RFC 7591); the registration response (client_id, and
        client_secret unless auth_method is "none"). Raises on an error response."""
        body = {"redirect_uris": redirect_uris, "token_endpoint_auth_method": auth_method,
                "application_type": application_type, "grant_types": ["authorization_code", "refresh_token"],
                "response_types": ["code"], "client_name": client_name, **metadata}
        if scope is not None:
            body["scope"] = scope
        r = httpx.post(self.registration_endpoint, json=body, timeout=10)
        if r.status_code != 201:
            raise RuntimeError(f"registration failed: {r.status_code} {r.text}")
        return r.json()

    def authorization_url(self, client_id: str, redirect_uri: str, code_challenge: str, *, state: str,
                          scope: str = ALL_SCOPES, resource: str | None = None, **extra: str) -> str:
        """An authorization request URL (PKCE S256, RFC 8707 resource: this IdP's first by default)."""
        params = {"response_type": "code", "client_id": client_id, "redirect_uri": redirect_uri, "scope": scope,
                  "state": state, "code_challenge": code_challenge, "code_challenge_method": "S256",
                  "resource": resource or self.resource, **extra}
        return f"{self.authorization_endpoint}?{urllib.parse.urlencode(params)}"

    def token_request(self, data: dict, client_id: str, client_secret: str | None = None) -> httpx.Response:
        """A raw token endpoint request: client_secret_basic with a secret, else a public client."""
        if client_secret is None:
            return httpx.post(self.token_endpoint, data={**data, "client_id": client_id}, timeout=10)
        return httpx.post(self.token_endpoint, data=data, auth=(client_id, client_secret), timeout=10)

    def exchange_code(self, client_id: str, code: str, redirect_uri: str, code_verifier: str, *,
                      client_secret: str | None = None, resource: str | None = None) -> dict:
        """The token response for an authorization code; raises on an error response."""
        r = self.token_request({"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri,
                                "code_verifier": code_verifier, "resource": resource or self.resource},
                               client_id, client_secret)
        if r.status_code != 200:
            raise RuntimeError(f"code exchange failed: {r.status_code} {r.text}")
        return r.json()

    def refresh(self, client_id: str, refresh_token: str, *, client_secret: str | None = None,
                resource: str | None = None, scope: str | None = None) -> httpx.Response:
        """The raw response to a refresh_token grant (200 with new tokens, or 400 invalid_grant...)."""
        data = {"grant_type": "refresh_token", "refresh_token": refresh_token, "resource": resource or self.resource}
        if scope is not None:
            data["scope"] = scope
        return self.token_request(data, client_id, client_secret)

    def revoke(self, token: str, client_id: str, *, client_secret: str | None = None,
               token_type_hint: str = "refresh_token") -> httpx.Response:
        """RFC 7009 revocation (200 whether or not the token was known)."""
        data = {"token": token, "token_type_hint": token_type_hint}
        if client_secret is None:
            return httpx.post(self.revocation_endpoint, data={**data, "client_id": client_id}, timeout=10)
        return httpx.post(self.revocation_endpoint, data=data, auth=(client_id, client_secret), timeout=10)

    def introspect(self, token: str, client_id: str, *, client_secret: str | None = None) -> dict:
        """RFC 7662 introspection of an opaque token (refresh tokens); {"active": false, ...} if dead."""
        data = {"token": token}
        if client_secret is None:
            r = httpx.post(self.introspection_endpoint, data={**data, "client_id": client_id}, timeout=10)
        else:
            r = httpx.post(self.introspection_endpoint, data=data, auth=(client_id, client_secret), timeout=10)
        r.raise_for_status()
        return r.json()

    def sign_in(self, login: str, *, scope: str = ALL_SCOPES, resource: str | None = None,
                consent: bool = True, client: dict | None = None, callback: Callback | None = None) -> dict:
        """The whole flow for one person, for tests that need a token rather than the flow:
        registers a public client (unless `client` is given), signs `login` in with the browser,
        exchanges the code. The redirect goes to `callback` (a running Callback; a fresh one if
        none: right for native clients, whose loopback redirects may use any port). Gives the
        token response plus "client_id" (and "client_secret")."""
        import browser  # a module of these tests; imported here so the IdP needs no chromium

        with (contextlib.nullcontext(callback) if callback is not None else Callback()) as cb:
            if client is None:
                client = self.register([cb.url])
            verifier, challenge = pkce()
            state = secrets.token_urlsafe(12)
            url = self.authorization_url(client["client_id"], cb.url, challenge, state=state, scope=scope,
                                         resource=resource)
            page = browser.sign_in(url, login, consent=consent)
            got = cb.wait()
            if got.get("state") != state or "code" not in got:
                raise RuntimeError(f"sign-in of {login} did not come back with a code: {got} (page: {page.text[:500]})")
            tokens = self.exchange_code(client["client_id"], got["code"], cb.url, verifier,
                                        client_secret=client.get("client_secret"), resource=resource)
        return {**tokens, "client_id": client["client_id"],
                **({"client_secret": client["client_secret"]} if client.get("client_secret") else {})}


class ProtectedServer(_Process):
    """servers/protected_server.py in the servers virtualenv: an MCP server (streamable HTTP at /mcp,
    legacy SSE at /sse) that accepts only this IdP's JWTs for its own resource URL.

    Attributes once started: url (http://127.0.0.1:PORT/mcp), sse_url, port, resource,
    resource_metadata (the RFC 9728 document's URL). Events (`events()`): one "request" record per
    HTTP request: method, path, status, sub, client_id, token (token_hash or null), rpc (the
    JSON-RPC method), tool, and "denied" (why the server refused, if it did).
    """

    name = "protected-server"

    def __init__(self, issuer: str, *, port: int = 0, resource: str | None = None, log_dir: Path | None = None,
                 required_scopes: list[str] | None = None, python: Path = SERVERS_PYTHON):
        super().__init__(log_dir)
        self.issuer = issuer
        self.port = port
        self.resource = resource
        self.required_scopes = required_scopes
        self.python = python
        self.url: str | None = None

    def _command(self) -> list[str]:
        if not Path(self.python).exists():
            raise RuntimeError(f"{self.python} is missing; run scripts/test (it makes the servers virtualenv)")
        cmd = [str(self.python), str(SERVER_SCRIPT), "--port", str(self.port), "--issuer", self.issuer,
               "--log", str(self.event_log), "--exit-on-stdin-eof"]
        if self.resource:
            cmd += ["--resource", self.resource]
        for s in self.required_scopes or []:
            cmd += ["--required-scope", s]
        return cmd

    def start(self, timeout: float = 30) -> ProtectedServer:
        self._spawn(timeout)
        for key, value in self.info.items():
            setattr(self, key, value)
        return self

    def __enter__(self) -> ProtectedServer:
        return self.start() if self.proc is None else self

    def restart(self) -> ProtectedServer:
        self.stop()
        self.port = self.info["port"]
        self._start_on_same_port()
        for key, value in self.info.items():
            setattr(self, key, value)
        return self


class KeyedServer(_Process):
    """servers/keyed_server.py: an MCP server that takes each person's own API key (`keys`: name -> key)
    in `X-Api-Key`, and no OAuth. Events: one "request" record per HTTP request (owner, key hash)."""

    name = "keyed-server"

    def __init__(self, keys: dict[str, str], *, log_dir: Path | None = None, python: Path = SERVERS_PYTHON):
        super().__init__(log_dir)
        self.keys = keys
        self.python = python
        self.url: str | None = None

    def _command(self) -> list[str]:
        if not Path(self.python).exists():
            raise RuntimeError(f"{self.python} is missing; run scripts/test (it makes the servers virtualenv)")
        cmd = [str(self.python), str(KEYED_SCRIPT), "--log", str(self.event_log), "--exit-on-stdin-eof"]
        for name, key in self.keys.items():
            cmd += ["--key", f"{name}={key}"]
        return cmd

    def __enter__(self) -> KeyedServer:
        if self.proc is None:
            self._spawn(30)
            self.url = self.info["url"]
        return self


class Callback:
    """A redirect URI served on 127.0.0.1 (a thread): records the query of each request to `path`
    and answers 200 with the query as text; serves `documents` (path -> JSON) too; 404 elsewhere.

        with Callback() as cb:        # cb.url == "http://127.0.0.1:PORT/callback"
            ...
            params = cb.wait()         # {"code": ..., "state": ..., "iss": ...} or {"error": ...}
    """

    def __init__(self, path: str = "/callback", documents: dict[str, dict] | None = None):
        self.path = path
        # Other paths it serves as JSON (a Client ID Metadata Document, say); set before or after start.
        self.documents: dict[str, dict] = dict(documents or {})
        self.fetched: list[str] = []
        self.hits: list[dict] = []
        self._cond = threading.Condition()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's naming)
                parsed = urllib.parse.urlsplit(self.path)
                if parsed.path in outer.documents:
                    doc = json.dumps(outer.documents[parsed.path]).encode()
                    outer.fetched.append(parsed.path)
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(doc)))
                    self.end_headers()
                    self.wfile.write(doc)
                    return
                if parsed.path != outer.path:  # the browser's /favicon.ico, say
                    self.send_error(404)
                    return
                query = dict(urllib.parse.parse_qsl(parsed.query, keep_blank_values=True))
                with outer._cond:
                    outer.hits.append({"path": parsed.path, **query})
                    outer._cond.notify_all()
                body = ("callback received: " + json.dumps(query, sort_keys=True)).encode()
                self.send_response(200)
                self.send_header("content-type", "text/plain; charset=utf-8")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}{path}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def wait(self, timeout: float = 10, index: int = -1) -> dict:
        """The query of a request that reached the callback (the latest by default); waits for one."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.hits) > (index if index >= 0 else 0), timeout):
                raise TimeoutError(f"nothing reached {self.url} within {timeout} s")
            hit = dict(self.hits[index])
        hit.pop("path", None)
        return hit

    def __enter__(self) -> Callback:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
