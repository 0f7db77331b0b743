"""An upstream MCP server that serves only people signed in at its authorization server (issue 58's tests).

    python protected_server.py --issuer URL [--port PORT] [--resource URL] [--log FILE]
        [--required-scope SCOPE ...] [--exit-on-stdin-eof]

The MCP Python SDK's MCPServer with its resource-server auth (`token_verifier=` and
`auth=AuthSettings(...)`): a request without a valid token gets 401 with
`WWW-Authenticate: Bearer ..., resource_metadata="http://127.0.0.1:PORT/.well-known/oauth-protected-resource/mcp"`,
and that document (RFC 9728) names the issuer as the authorization server. The token verifier
checks a JWT access token (RFC 9068) against the issuer's JWKS: signature, `iss`, `aud` equal to
this server's resource URL, `exp`, `typ` at+jwt; the SDK then checks the required scopes
(default `orders:read`; 403 insufficient_scope without them).

Streamable HTTP at /mcp, legacy SSE at /sse (+ /messages/). Tools:
  whoami()                    -> {"sub", "scopes", "client_id"}
  list_orders(limit=3)        -> {"sub", "orders": [...]}, each person's own orders
  cancel_order(order_id)      -> needs scope orders:write; without it the HTTP request is
                                 refused with 403 and `WWW-Authenticate: Bearer error="insufficient_scope",
                                 scope="orders:write", resource_metadata="..."` (an ASGI middleware
                                 reading the JSON-RPC body, as the SDK has no per-tool scopes)

--log FILE gets one JSON line per HTTP request: time, method, path, status, sub (or null),
client_id, token (first 16 hex digits of the bearer token's SHA-256, or null), rpc (the
JSON-RPC method), tool, denied. Once listening it prints one JSON line:
{"url", "sse_url", "port", "resource", "resource_metadata"}.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import signal
import socket
import sys
import threading
from datetime import datetime, timezone
from typing import Any

import anyio
import httpx2 as httpx
import jwt
import uvicorn
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.routes import build_resource_metadata_url
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from starlette.middleware import Middleware
from starlette.routing import Mount, Route

WRITE_SCOPE = "orders:write"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()[:16]


class JwtVerifier:
    """Verifies the IdP's JWT access tokens; the JWKS is fetched on first use and again for an unknown key."""

    def __init__(self, issuer: str, resource: str):
        self.issuer = issuer
        self.resource = resource
        self._jwks_client: jwt.PyJWKClient | None = None

    def _client(self) -> jwt.PyJWKClient:
        if self._jwks_client is None:
            meta = httpx.get(f"{self.issuer}/.well-known/oauth-authorization-server", timeout=10).json()
            self._jwks_client = jwt.PyJWKClient(meta["jwks_uri"], cache_keys=True, timeout=10)
        return self._jwks_client

    def decode(self, token: str) -> dict[str, Any]:
        """The claims of a valid token for this resource; raises jwt.PyJWTError (or OSError) otherwise."""
        header = jwt.get_unverified_header(token)
        if header.get("typ", "").lower() not in ("at+jwt", "application/at+jwt"):
            raise jwt.InvalidTokenError(f"not an RFC 9068 access token (typ {header.get('typ')!r})")
        key = self._client().get_signing_key_from_jwt(token)
        return jwt.decode(token, key.key, algorithms=["RS256", "ES256", "PS256"], audience=self.resource,
                          issuer=self.issuer, options={"require": ["exp", "iat", "iss", "aud", "sub"]})

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            claims = await anyio.to_thread.run_sync(self.decode, token)
        except (jwt.PyJWTError, OSError, ValueError) as err:
            print(f"token refused: {err}", file=sys.stderr, flush=True)
            return None
        audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
        # The token's own audience, so the SDK's validate_token_resource checks it a second time.
        resource = self.resource if self.resource in audiences else str(audiences[0])
        return AccessToken(token=token, client_id=str(claims.get("client_id", "")),
                           scopes=str(claims.get("scope", "")).split(), expires_at=int(claims["exp"]),
                           resource=resource, subject=str(claims["sub"]), claims=claims)


# Each person's orders; anyone else gets some derived from their name, so data differs per person.
ORDERS = {
    "alice": [{"id": "A-1001", "item": "blue teapot", "total": 34.5},
              {"id": "A-1002", "item": "oolong, 250 g", "total": 18.0},
              {"id": "A-1003", "item": "tea cosy", "total": 12.25},
              {"id": "A-1004", "item": "kettle", "total": 59.0}],
    "bob": [{"id": "B-2001", "item": "bicycle bell", "total": 9.99},
            {"id": "B-2002", "item": "inner tube", "total": 7.5}],
}
CANCELLED: set[str] = set()


def orders_of(sub: str) -> list[dict]:
    if sub in ORDERS:
        return ORDERS[sub]
    seed = hashlib.sha256(sub.encode()).hexdigest()
    return [{"id": f"{sub[:1].upper() or 'X'}-{int(seed[i:i + 4], 16) % 9000 + 1000}", "item": f"item {seed[i:i + 6]}",
             "total": int(seed[i + 6:i + 10], 16) / 100} for i in (0, 10, 20)]


def caller() -> AccessToken:
    token = get_access_token()
    if token is None:  # the SDK's RequireAuthMiddleware lets no such request through
        raise ToolError("not signed in")
    return token


def build_server(issuer: str, resource: str, required_scopes: list[str]) -> MCPServer:
    mcp = MCPServer(
        "protected-orders",
        instructions="Orders of the signed-in person.",
        token_verifier=JwtVerifier(issuer, resource),
        auth=AuthSettings(issuer_url=issuer, resource_server_url=resource, required_scopes=required_scopes,
                          validate_token_resource=True),
    )

    @mcp.tool()
    def whoami() -> dict[str, Any]:
        """Who the bearer token says the caller is."""
        token = caller()
        return {"sub": token.subject, "scopes": token.scopes, "client_id": token.client_id}

    @mcp.tool()
    def list_orders(limit: int = 3) -> dict[str, Any]:
        """The caller's orders, newest first, at most `limit`."""
        token = caller()
        orders = [dict(o, cancelled=o["id"] in CANCELLED) for o in orders_of(token.subject or "")]
        return {"sub": token.subject, "orders": orders[:max(limit, 0)]}

    @mcp.tool()
    def cancel_order(order_id: str) -> dict[str, Any]:
        """Cancels one of the caller's orders (needs scope orders:write)."""
        token = caller()
        if WRITE_SCOPE not in token.scopes:  # the middleware answers 403 first; this is the backstop
            raise ToolError(f"scope {WRITE_SCOPE} is required")
        if order_id not in {o["id"] for o in orders_of(token.subject or "")}:
            raise ToolError(f"{order_id} is not an order of {token.subject}")
        CANCELLED.add(order_id)
        return {"sub": token.subject, "cancelled": order_id}

    return mcp


class RequestLog:
    """Inside the SDK's auth middleware (so it sees the verified token): logs every request and
    refuses a tools/call of cancel_order with 403 insufficient_scope unless the token has orders:write."""

    def __init__(self, app, log_path: str | None, resource_metadata: str):
        self.app = app
        self.log_path = log_path
        self.resource_metadata = resource_metadata
        self.lock = threading.Lock()

    def write(self, record: dict) -> None:
        if not self.log_path:
            return
        line = json.dumps({"time": datetime.now(timezone.utc).isoformat(), "event": "request", **record})
        with self.lock, open(self.log_path, "a") as f:
            f.write(line + "\n")

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        auth = headers.get("authorization", "")
        bearer = auth[7:] if auth.lower().startswith("bearer ") else None
        user = scope.get("user")
        token = user.access_token if isinstance(user, AuthenticatedUser) else None
        record: dict[str, Any] = {"method": scope["method"], "path": scope["path"], "status": None,
                                  "sub": token.subject if token else None,
                                  "client_id": token.client_id if token else None,
                                  "token": token_hash(bearer) if bearer else None,
                                  "rpc": None, "tool": None, "denied": None}

        if scope["method"] == "POST":
            # Read the whole body, look at the JSON-RPC message, hand the body on unchanged.
            chunks, more = [], True
            while more:
                message = await receive()
                if message["type"] != "http.request":
                    break
                chunks.append(message.get("body", b""))
                more = message.get("more_body", False)
            body = b"".join(chunks)
            try:
                msg = json.loads(body)
                first = msg[0] if isinstance(msg, list) and msg else msg
                if isinstance(first, dict):
                    record["rpc"] = first.get("method")
                    if record["rpc"] == "tools/call":
                        record["tool"] = (first.get("params") or {}).get("name")
            except ValueError:
                pass
            replayed = False

            async def replay():
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            inner_receive = replay
        else:
            inner_receive = receive

        async def logged_send(message):
            if message["type"] == "http.response.start":
                record["status"] = message["status"]
                for k, v in message.get("headers", []):
                    if k.lower() == b"www-authenticate" and record["status"] in (401, 403):
                        record["denied"] = v.decode("latin-1")
            await send(message)

        if token is not None and record["tool"] == "cancel_order" and WRITE_SCOPE not in token.scopes:
            record["denied"] = f"insufficient_scope {WRITE_SCOPE}"
            body = json.dumps({"error": "insufficient_scope",
                               "error_description": f"cancel_order needs scope {WRITE_SCOPE}"}).encode()
            challenge = (f'Bearer error="insufficient_scope", scope="{WRITE_SCOPE}", '
                         f'resource_metadata="{self.resource_metadata}", '
                         f'error_description="cancel_order needs scope {WRITE_SCOPE}"')
            await logged_send({"type": "http.response.start", "status": 403,
                               "headers": [(b"content-type", b"application/json"),
                                           (b"content-length", str(len(body)).encode()),
                                           (b"www-authenticate", challenge.encode())]})
            await send({"type": "http.response.body", "body": body})
            self.write(record)
            return
        try:
            await self.app(scope, inner_receive, logged_send)
        finally:
            self.write(record)


def build_app(mcp: MCPServer, resource_metadata: str, log_path: str | None):
    app = mcp.streamable_http_app(streamable_http_path="/mcp")
    # Legacy SSE too: the SSE app's routes (wrapped in the SDK's RequireAuthMiddleware) under
    # the same auth middleware.
    sse = mcp.sse_app(sse_path="/sse", message_path="/messages/")
    app.router.routes.extend(r for r in sse.routes if isinstance(r, (Route, Mount)) and r.path in ("/sse", "/messages"))
    # Innermost of the app's middleware, after authentication.
    app.user_middleware.append(Middleware(RequestLog, log_path=log_path, resource_metadata=resource_metadata))
    return app


class Server(uvicorn.Server):
    """Prints the ready line once the app has started (its lifespan ran) and the socket listens."""

    ready_line: str = ""

    async def startup(self, sockets=None):
        await super().startup(sockets)
        if not self.started:  # the lifespan failed; uvicorn has said why on stderr
            return
        sys.stdout.write(self.ready_line + "\n")
        sys.stdout.flush()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--issuer", required=True)
    p.add_argument("--resource", help="this server's resource URL (default http://127.0.0.1:PORT/mcp)")
    p.add_argument("--log")
    p.add_argument("--required-scope", action="append", dest="required_scopes")
    p.add_argument("--exit-on-stdin-eof", action="store_true")
    args = p.parse_args()

    # The port first: the resource URL (the token audience) has it.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    resource = args.resource or f"{base}/mcp"
    issuer = args.issuer.rstrip("/")
    resource_metadata = str(build_resource_metadata_url(resource))

    mcp = build_server(issuer, resource, args.required_scopes or ["orders:read"])
    app = build_app(mcp, resource_metadata, args.log)
    server = Server(uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2))
    server.ready_line = json.dumps({"url": f"{base}/mcp", "sse_url": f"{base}/sse", "port": port,
                                    "resource": resource, "resource_metadata": resource_metadata})

    if args.exit_on_stdin_eof:
        def watch() -> None:
            sys.stdin.buffer.read()
            os.kill(os.getpid(), signal.SIGTERM)

        threading.Thread(target=watch, daemon=True).start()
    asyncio.run(server.serve(sockets=[sock]))


if __name__ == "__main__":
    main()
