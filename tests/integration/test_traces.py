"""OpenTelemetry traces (`serve --otlp-endpoint`), received by a real OTLP receiver: Arize Phoenix from PyPI
(`phoenix serve`, OTLP over HTTP), read back through its REST API. A tool call's spans continue the caller's
W3C trace, nest request > execution > bridge call > upstream call, say which tool and server, and carry no
argument or answer."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
from pathlib import Path

import httpx2 as httpx
import pytest

from cluster import free_port
from conftest import start_http
from stateless import ACCEPT, META, body, message_of
from test_upstream import EVERYTHING

PHOENIX = Path(os.environ.get("CEM_PHOENIX", Path(__file__).parents[2] / ".test-env" / "phoenix" / "bin" / "phoenix"))
# What the code sends the upstream: it must not be in any span.
MARKER = "a-secret-argument-7f3c"


@pytest.fixture
def phoenix(tmp_path: Path):
    assert PHOENIX.exists(), f"{PHOENIX} is missing: scripts/test installs Phoenix into .test-env/phoenix"
    port = free_port()
    work = tmp_path / "phoenix"
    work.mkdir()
    env = {**os.environ, "PHOENIX_WORKING_DIR": str(work), "PHOENIX_HOST": "127.0.0.1",
           "PHOENIX_PORT": str(port), "PHOENIX_GRPC_PORT": str(free_port()),
           "PHOENIX_TELEMETRY_ENABLED": "false"}
    log = open(tmp_path / "phoenix.log", "wb")
    proc = subprocess.Popen([str(PHOENIX), "serve"], env=env, stdout=log, stderr=log, cwd=work)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert proc.poll() is None, (tmp_path / "phoenix.log").read_text()[-3000:]
        assert time.monotonic() < deadline, (tmp_path / "phoenix.log").read_text()[-3000:]
        time.sleep(0.3)
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()


def serve_traced(tmp_path: Path, phoenix: str, delay_ms: int, log_level: str = "info"):
    data = tmp_path / f"data-{delay_ms}"
    data.mkdir()
    config = tmp_path / "mcp_config.json"
    config.write_text(json.dumps({"mcpServers": {"everything": {"command": "node", "args": [EVERYTHING, "stdio"]}}}))
    # The batch processor's delay, a standard OTel variable the SDK reads.
    return start_http(data, "--otlp-endpoint", phoenix, "--log-level", log_level, config=config,
                      env={"OTEL_BSP_SCHEDULE_DELAY": str(delay_ms)})


def call(url: str, code: str, traceparent: str | None = None) -> dict:
    headers = {**ACCEPT, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "execute_code"}
    if traceparent:
        headers["traceparent"] = traceparent
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": "execute_code", "arguments": {"code": code}, "_meta": META}}
    r = httpx.post(url, json=request, headers=headers, timeout=120)
    assert r.status_code == 200, r.text
    return body(message_of(r)["result"])


def spans(phoenix: str) -> list[dict]:
    r = httpx.get(f"{phoenix}/v1/projects/default/spans", params={"limit": 1000}, timeout=10)
    if r.status_code == 404:  # no span yet: the project is made by the first one
        return []
    r.raise_for_status()
    return r.json()["data"]


def wait_for(phoenix: str, ready, timeout: float = 60) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        got = spans(phoenix)
        if ready(got) or time.monotonic() > deadline:
            return got
        time.sleep(0.3)


def flat(attributes: dict, prefix: str = "") -> dict:
    """Phoenix nests dotted attribute names; flattened back."""
    out = {}
    for key, value in attributes.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


# At warn, the log filter turns the server's spans off for logs: traces must not depend on it.
@pytest.mark.parametrize("log_level", ["info", "warn"])
def test_a_tool_call_is_traced_from_the_callers_trace_to_the_upstream(tmp_path: Path, phoenix: str, log_level: str):
    server = serve_traced(tmp_path, phoenix, delay_ms=100, log_level=log_level)
    trace_id, parent_id = secrets.token_hex(16), secrets.token_hex(8)
    unsampled, last = secrets.token_hex(16), secrets.token_hex(16)
    try:
        code = (f"a = call_tool('everything.echo', {{'message': '{MARKER}'}})\n"
                f"b = call_tool('everything.echo', {{'message': '{MARKER}'}})\n"
                "found = search_tools('echo')\nresult = 'ok'")
        answer = call(server.url, code, f"00-{trace_id}-{parent_id}-01")
        assert answer["result"] == "ok", answer
        failed = call(server.url, "raise ValueError('no')")
        assert not failed["success"], failed
        # A caller that does not sample its trace: the server follows it (parent-based sampling).
        assert call(server.url, "result = 1", f"00-{unsampled}-{secrets.token_hex(8)}-00")["success"]
        # One more, sampled: once its span is in, the unsampled call's would be too.
        assert call(server.url, "result = 3", f"00-{last}-{secrets.token_hex(8)}-01")["success"]

        def complete(got: list[dict]) -> bool:
            names = [s["name"] for s in got if s["context"]["trace_id"] == trace_id]
            return (names.count("upstream everything.echo") == 2 and "tools/call execute_code" in names
                    and any(s["context"]["trace_id"] == last and s["name"] == "tools/call execute_code" for s in got)
                    and any(s["status_code"] == "ERROR" and s["name"] == "tools/call execute_code" for s in got))
        got = wait_for(phoenix, complete)
    finally:
        server.stop()
    assert complete(got), ([s["name"] for s in got], server.log_text()[-2000:])
    by_id = {s["context"]["span_id"]: s for s in got}
    ours = [s for s in got if s["context"]["trace_id"] == trace_id]
    names = sorted(s["name"] for s in ours)
    assert names == sorted(["tools/call execute_code", "execution", "bridge call", "bridge call", "bridge search",
                            "upstream everything.echo", "upstream everything.echo"]), names

    # The request continues the caller's span; each layer is the child of the one above.
    request = next(s for s in ours if s["name"] == "tools/call execute_code")
    assert request["parent_id"] == parent_id, request
    assert flat(request["attributes"]).get("tool") == "execute_code", request
    execution = next(s for s in ours if s["name"] == "execution")
    assert execution["parent_id"] == request["context"]["span_id"], execution
    for bridge in (s for s in ours if s["name"].startswith("bridge")):
        assert bridge["parent_id"] == execution["context"]["span_id"], bridge
    for upstream in (s for s in ours if s["name"].startswith("upstream")):
        parent = by_id[upstream["parent_id"]]
        assert parent["name"] == "bridge call", (upstream, parent)
        assert flat(parent["attributes"])["tool"] == "everything.echo", parent
        attributes = flat(upstream["attributes"])
        assert (attributes["server"], attributes["tool"]) == ("everything", "echo"), upstream
        assert upstream["status_code"] != "ERROR", upstream
        assert upstream["start_time"] >= execution["start_time"] and upstream["end_time"] <= execution["end_time"]

    # A call with no traceparent starts its own trace; its failed execution says so.
    others = [s for s in got if s["context"]["trace_id"] not in (trace_id, unsampled, last)]
    failed_exec = [s for s in others if s["name"] == "execution"]
    assert [s["status_code"] for s in failed_exec] == ["ERROR"], failed_exec
    root = by_id[failed_exec[0]["parent_id"]]
    assert root["name"] == "tools/call execute_code" and root["parent_id"] is None, root
    assert not [s for s in got if s["context"]["trace_id"] == unsampled]

    # Names and ids only: nothing the code sent or got back is in a span.
    assert MARKER not in json.dumps(got)


def test_spans_still_queued_are_sent_when_the_server_stops(tmp_path: Path, phoenix: str):
    # A batch delay of ten minutes: the span can only arrive through the flush at shutdown.
    server = serve_traced(tmp_path, phoenix, delay_ms=600_000)
    trace_id = secrets.token_hex(16)
    try:
        assert call(server.url, "result = 2", f"00-{trace_id}-{secrets.token_hex(8)}-01")["result"] == 2
        time.sleep(1)
        assert not [s for s in spans(phoenix) if s["context"]["trace_id"] == trace_id]
    finally:
        assert server.stop() == 0, server.log_text()[-2000:]
    got = wait_for(phoenix, lambda got: any(s["context"]["trace_id"] == trace_id for s in got), timeout=20)
    assert {s["name"] for s in got if s["context"]["trace_id"] == trace_id} == {"tools/call execute_code",
                                                                               "execution"}, got
