"""execute_code as a task (the MCP Tasks extension, SEP-2663, protocol 2026-07-28), over streamable HTTP.

A client that declares the extension in its capabilities gets a task for each execute_code call; it polls
`tasks/get` until the result is there, or cancels with `tasks/cancel`, which kills the execution. The result is
kept for the task's time to live, so a client that went away fetches it later. Requests are raw stateless HTTP
requests, as a Tasks client sends them (no Python SDK release speaks the extension yet).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx2 as httpx
import pytest

from conftest import start_http

TASKS = "io.modelcontextprotocol/tasks"
ALICE, BOB = "alice-task-token-0123456789", "bob-task-token-0123456789ab"


def meta(tasks: bool = True) -> dict:
    return {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "tasks-test", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}} if tasks else {}}


def rpc(url: str, method: str, params: dict, name: str, token: str = ALICE, tasks: bool = True) -> dict:
    """One stateless request; the JSON-RPC message it answered with."""
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
               "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method, "Mcp-Name": name,
               "Authorization": f"Bearer {token}"}
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta(tasks)}}
    with httpx.Client(timeout=30) as client:  # a fresh connection each time: nothing ties the calls together
        r = client.post(url, json=body, headers=headers)
    assert r.status_code in (200, 400), r.text
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        return [json.loads(l[5:]) for l in r.text.splitlines() if l.startswith("data:") and l[5:].strip()][-1]
    return r.json()


def start(url: str, code: str, **kw) -> dict:
    return rpc(url, "tools/call", {"name": "execute_code", "arguments": {"code": code}}, "execute_code", **kw)


def get(url: str, task_id: str, **kw) -> dict:
    return rpc(url, "tasks/get", {"taskId": task_id}, task_id, **kw)


def wait_terminal(url: str, task_id: str, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        task = get(url, task_id)["result"]
        if task["status"] in ("completed", "failed", "cancelled"):
            return task
        time.sleep(0.2)
    raise AssertionError(f"task {task_id} did not finish: {task}")


@pytest.fixture
def server(data_dir: Path, tmp_path: Path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"auth": {"tokens": {"alice": ALICE, "bob": BOB}}}))
    srv = start_http(data_dir, config=config)
    yield srv
    srv.stop()


def test_a_task_is_started_polled_and_fetched(server):
    created = start(server.url, "import time\ntime.sleep(1)\nresult = 6 * 7")["result"]
    assert created["resultType"] == "task" and created["status"] == "working", created
    assert created["ttlMs"] >= 60_000 and created["pollIntervalMs"] > 0
    assert get(server.url, created["taskId"])["result"]["status"] == "working"
    done = wait_terminal(server.url, created["taskId"])
    assert done["status"] == "completed", done
    assert done["result"]["structuredContent"]["result"] == 42
    assert done["result"]["isError"] is False
    # A client without the extension gets the answer at once, as before.
    plain = start(server.url, "result = 1", tasks=False)["result"]
    assert plain.get("resultType", "complete") == "complete" and plain["structuredContent"]["result"] == 1


def test_a_cancelled_task_stops_its_execution(server, data_dir: Path):
    beat = data_dir / "tenants" / "token-alice" / "workspace" / "beat.txt"
    code = "import time\nwhile True:\n    open('beat.txt', 'a').write('x')\n    time.sleep(0.05)"
    task_id = start(server.url, code)["result"]["taskId"]
    deadline = time.monotonic() + 15
    while not beat.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert beat.exists(), "the task's code ran"
    answer = rpc(server.url, "tasks/cancel", {"taskId": task_id}, task_id)
    assert "error" not in answer, answer
    assert wait_terminal(server.url, task_id, timeout=5)["status"] == "cancelled"
    time.sleep(1.0)
    settled = beat.stat().st_size
    time.sleep(0.5)
    assert beat.stat().st_size == settled, "the execution still runs after tasks/cancel"
    # The worker is free: the next execution runs at once.
    assert start(server.url, "result = 2", tasks=False)["result"]["structuredContent"]["result"] == 2


def test_a_result_waits_for_a_client_that_went_away(server):
    task_id = start(server.url, "import time\ntime.sleep(0.5)\nresult = 'kept'")["result"]["taskId"]
    time.sleep(2)  # nobody polls; every request above used its own connection, now closed
    done = get(server.url, task_id)["result"]
    assert done["status"] == "completed" and done["result"]["structuredContent"]["result"] == "kept"
    assert get(server.url, task_id)["result"]["status"] == "completed", "fetching does not consume it"


def test_another_principal_cannot_see_or_cancel_a_task(server):
    task_id = start(server.url, "import time\ntime.sleep(1)\nresult = 'mine'")["result"]["taskId"]
    assert "error" in get(server.url, task_id, token=BOB)
    assert "error" in rpc(server.url, "tasks/cancel", {"taskId": task_id}, task_id, token=BOB)
    assert wait_terminal(server.url, task_id)["status"] == "completed"


def test_the_typescript_tasks_client_runs_and_cancels_a_task(server, data_dir: Path):
    """The same, through a real Tasks client: @modelcontextprotocol/ext-tasks on the TypeScript SDK v2."""
    import os
    import subprocess

    from conftest import CLIENTS, JS

    beat = data_dir / "tenants" / "token-alice" / "workspace" / "beat.txt"
    out = subprocess.run(["node", str(CLIENTS / "ts_tasks_client.mjs"), server.url, ALICE], capture_output=True,
                         text=True, timeout=120, cwd=JS, env={**os.environ, "NO_COLOR": "1"}, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, f"the client exited {out.returncode}:\n{out.stdout}\n{out.stderr}"
    seen = json.loads(out.stdout[out.stdout.index("{"):])
    assert seen["era"] == "modern" and seen["serverCapabilities"]["extensions"] == {TASKS: {}}, seen
    assert seen["capabilities"]["execution"] and seen["capabilities"]["cancellation"], seen
    done = seen["completed"]
    assert done["kind"] == "task" and done["taskId"] and done["outcome"] == "completed", done
    assert done["structured"]["result"] == 42 and done["isError"] is False, done
    cancelled = seen["cancelled"]
    assert cancelled["kind"] == "task" and cancelled["statusBeforeCancel"] == "working", cancelled
    assert cancelled["outcome"] == "cancelled" and cancelled["serverStatusAfter"] == "cancelled", cancelled
    assert [w["method"] for w in seen["wire"]].count("tasks/cancel") == 1, seen["wire"]
    assert beat.exists(), "the cancelled task's code ran"
    time.sleep(1.0)
    settled = beat.stat().st_size
    time.sleep(0.5)
    assert beat.stat().st_size == settled, "the execution still runs after the client cancelled it"
