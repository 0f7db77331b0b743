"""A real OAuth authorization server for the tests: panva's oidc-provider, run by servers/oidc_provider.mjs.

    with OidcProvider(resource="http://127.0.0.1:PORT/mcp") as op:
        token = op.token("alice")              # JWT, aud = resource, sub = "alice"
        op.restart("ES256", "k2")              # key rotation, same port, same issuer

Clients (client_credentials; secret "<name>-secret"): alice, bob, carol (execute tools:read
workspace:read workspace:write skills:write), reader (tools:read), shortlived (like alice, tokens
live 2 s). Other tokens live 600 s. Accepted resources: the given one and OTHER_RESOURCE.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx2 as httpx  # the HTTP client mcp 2.x is built on (the sync API of httpx)

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).resolve().parent / "servers" / "oidc_provider.mjs"
JS = REPO / "tests" / "js"

OTHER_RESOURCE = "https://other.invalid/mcp"
FULL_SCOPES = "execute tools:read workspace:read workspace:write skills:write"
CLIENT_SCOPES = {
    "alice": FULL_SCOPES,
    "bob": FULL_SCOPES,
    "carol": FULL_SCOPES,
    "shortlived": FULL_SCOPES,
    "reader": "tools:read",
}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OidcProvider:
    def __init__(
        self,
        resource: str,
        alg: str = "RS256",
        kid: str = "k1",
        port: int = 0,
        log_dir: Path | None = None,
        issuer_path: str | None = None,
        lenient_scopes: bool = False,
    ):
        self.resource = resource
        self.alg = alg
        self.kid = kid
        self.port = port
        self.log_dir = log_dir
        self.issuer_path = issuer_path
        self.lenient_scopes = lenient_scopes
        self.proc: subprocess.Popen | None = None
        self.issuer: str | None = None
        self.jwks_uri: str | None = None
        self.token_endpoint: str | None = None
        self._log: Path | None = None

    def start(self, timeout: float = 20) -> OidcProvider:
        node = shutil.which("node")
        if node is None:
            raise RuntimeError("node is not on PATH")
        if not (JS / "node_modules" / "oidc-provider").is_dir():
            raise RuntimeError(f"oidc-provider is not installed; run `npm ci` in {JS}")
        cmd = [node, str(SCRIPT), "--port", str(self.port), "--resource", self.resource,
               "--alg", self.alg, "--kid", self.kid, "--exit-on-stdin-eof"]
        if self.issuer_path:
            cmd += ["--issuer-path", self.issuer_path]
        if self.lenient_scopes:
            cmd.append("--lenient-scopes")
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            self._log = self.log_dir / f"oidc-provider-{os.getpid()}-{time.monotonic_ns()}.log"
        else:
            self._log = None
        err = open(self._log, "wb") if self._log else subprocess.PIPE
        try:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, cwd=JS)
        finally:
            if self._log:
                err.close()
        line = b""
        deadline = time.monotonic() + timeout
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                break
            ready, _, _ = select.select([self.proc.stdout], [], [], min(left, 0.2))
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    break
                line += chunk
        try:
            info = json.loads(line)
        except ValueError:
            self._kill()
            raise RuntimeError(f"oidc-provider did not start (stdout {line!r}):\n{self.stderr_text()}") from None
        self.issuer, self.port = info["issuer"], info["port"]
        self.jwks_uri, self.token_endpoint = info["jwks_uri"], info["token_endpoint"]
        return self

    def stderr_text(self) -> str:
        if self._log is not None and self._log.exists():
            return self._log.read_text(errors="replace")
        if self.proc is not None and self.proc.stderr is not None and self.proc.poll() is not None:
            return self.proc.stderr.read().decode(errors="replace")
        return ""

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self, timeout: float = 10) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._kill()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()
        self.proc = None

    def restart(self, alg: str, kid: str) -> OidcProvider:
        """Key rotation: the same port (so the same issuer) with a freshly generated key."""
        port, issuer = self.port, self.issuer
        self.stop()
        self.alg, self.kid, self.port = alg, kid, port
        deadline = time.monotonic() + 10
        while True:  # the old socket is closed; retry briefly should the port still be busy
            try:
                self.start()
                break
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        assert self.issuer == issuer, (self.issuer, issuer)
        return self

    def __enter__(self) -> OidcProvider:
        return self.start() if self.proc is None else self

    def __exit__(self, *exc) -> None:
        self.stop()

    def token_response(self, client: str, scope: str | None = None, resource: str | None = None,
                       secret: str | None = None) -> httpx.Response:
        """The raw token endpoint response (client_secret_basic)."""
        data = {"grant_type": "client_credentials", "resource": resource or self.resource,
                "scope": CLIENT_SCOPES.get(client, "") if scope is None else scope}
        if not data["scope"]:
            del data["scope"]
        return httpx.post(self.token_endpoint, data=data, auth=(client, secret or f"{client}-secret"), timeout=10)

    def token(self, client: str, scope: str | None = None, resource: str | None = None) -> str:
        """A client-credentials access token (a JWT). scope defaults to all of the client's scopes."""
        r = self.token_response(client, scope, resource)
        if r.status_code != 200:
            raise RuntimeError(f"token request for {client} failed: {r.status_code} {r.text}")
        return r.json()["access_token"]

    def jwks(self) -> dict:
        return httpx.get(self.jwks_uri, timeout=10).json()
