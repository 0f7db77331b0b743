"""Upstream state is the tenant's (issue 57, item 1).

Real binary over HTTP with Alice's and Bob's tokens (one tenant each). Each tenant has its own process of every
stdio server; these tests check that the processes do not share the server's files either: their HOME, TMPDIR,
XDG_* and working directory are the tenant's own (`<data>/tenants/<id>/upstream/<server>/`, `${CEM_TENANT_DIR}` in
the config), a fixed path in a server's config is held by the first tenant that uses it, a server marked
`"shared": true` is one process for everyone, and (with Landlock) a tenant's process writes nowhere else.
Upstreams: our hostile server (a stateful one, by hand) and the real server-memory.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import JS, run_cli, start_http
from stateless import Stateless

HOSTILE = str(Path(__file__).parent / "servers" / "hostile_server.py")
MEMORY = str(JS / "node_modules" / "@modelcontextprotocol" / "server-memory" / "dist" / "index.js")
TOKENS = {"alice": "alice-token-0123456789abcdef", "bob": "bob-token-0123456789abcdef"}


def serve(tmp_path: Path, servers: dict):
    data = tmp_path / "data"
    data.mkdir()
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"mcpServers": servers, "auth": {"tokens": TOKENS}, "pii": {"mode": "manual"}}))
    server = start_http(data, config=config)
    return server, data, Stateless(server.url, TOKENS["alice"]), Stateless(server.url, TOKENS["bob"])


def tenant_root(data: Path, person: str) -> Path:
    """The tenant directory of `person` (its name is made from the principal's)."""
    [root] = [p for p in (data / "tenants").iterdir() if p.name.endswith(person)]
    return root


def run(client: Stateless, code: str) -> dict:
    return client.call("execute_code", {"code": code, "timeout_seconds": 60})


def hostile(env: dict | None = None, **extra) -> dict:
    return {"command": "/usr/bin/python3", "args": [HOSTILE], "env": env or {}, **extra}


REMEMBER = "result = call_tool('hostile.remember', {{'text': {text!r}}})\n"
RECALL = "result = call_tool('hostile.recall', {})\n"


def test_each_tenants_process_keeps_its_state_under_its_own_root(tmp_path: Path):
    server, data, alice, bob = serve(tmp_path, {
        # No path at all: the state file lands in the working directory.
        "cwd": hostile(),
        # The tenant's directory named in the config.
        "named": hostile({"HOSTILE_STATE_FILE": "${CEM_TENANT_DIR}/state.txt"}),
    })
    try:
        for name in ("cwd", "named"):
            code = f"call_tool('{name}.remember', {{'text': 'alice-secret-{name}'}})\nresult = call_tool('{name}.recall', {{}})"
            mine = run(alice, code)
            assert mine["success"] and f"alice-secret-{name}" in json.dumps(mine["result"]), mine
            theirs = run(bob, f"result = call_tool('{name}.recall', {{}})")
            assert theirs["success"], theirs
            assert "alice-secret" not in json.dumps(theirs["result"]), theirs
        where = run(bob, "result = call_tool('cwd.where', {})")
        assert where["success"], where
        root = tenant_root(data, "bob") / "upstream" / "cwd"
        assert where["result"]["cwd"] == str(root), where
        assert where["result"]["HOME"] == str(root / "home"), where
        assert where["result"]["TMPDIR"] == str(root / "tmp"), where
        assert (tenant_root(data, "alice") / "upstream" / "named" / "state.txt").read_text() == "alice-secret-named\n"
    finally:
        server.stop()


def test_a_fixed_path_is_one_tenants_and_a_shared_server_is_everyones(tmp_path: Path):
    fixed = tmp_path / "state.txt"
    together = tmp_path / "together.txt"
    server, _, alice, bob = serve(tmp_path, {
        "fixed": hostile({"HOSTILE_STATE_FILE": str(fixed)}),
        "together": hostile({"HOSTILE_STATE_FILE": str(together)}, shared=True),
    })
    try:
        mine = run(alice, "call_tool('fixed.remember', {'text': 'alice-secret'})\nresult = call_tool('fixed.recall', {})")
        assert mine["success"] and "alice-secret" in json.dumps(mine["result"]), mine
        refused = run(bob, "result = call_tool('fixed.recall', {})")
        assert not refused["success"], refused
        assert "alice-secret" not in json.dumps(refused)
        error = refused["error"]
        assert "mcpServers.fixed.env.HOSTILE_STATE_FILE" in error and "${CEM_TENANT_DIR}" in error, error
        assert '"shared": true' in error, error
        # Alice keeps her server.
        again = run(alice, "result = call_tool('fixed.recall', {})")
        assert again["success"] and "alice-secret" in json.dumps(again["result"]), again

        # A shared server: one process, one state, for everyone, and said so.
        stored = run(alice, "call_tool('together.remember', {'text': 'for everyone'})\nresult = call_tool('together.where', {})")
        assert stored["success"], stored
        shared = run(bob, "result = [call_tool('together.recall', {}), call_tool('together.where', {})]")
        assert shared["success"] and "for everyone" in json.dumps(shared["result"]), shared
        # The same process: the operator's working directory, not a tenant's root.
        assert shared["result"][1] == stored["result"], (shared, stored)
        assert "tenants" not in stored["result"]["cwd"], stored
        categories = bob.call("list_tool_categories", {})
        together_entry = [c for c in categories["categories"] if c.get("name") == "together"]
        assert together_entry and together_entry[0].get("shared") is True, categories
        fixed_entry = [c for c in categories["categories"] if c.get("name") == "fixed"]
        assert fixed_entry and not fixed_entry[0].get("shared"), categories
    finally:
        server.stop()


def landlock_enforced() -> bool:
    try:
        return "landlock" in Path("/sys/kernel/security/lsm").read_text()
    except OSError:
        return True  # the server decides, and says so in its log; this machine is expected to have it


def test_a_tenants_process_writes_only_under_its_root(tmp_path: Path):
    if not landlock_enforced():
        pytest.skip("this kernel has no Landlock: tenants' processes run unconfined (the server logs it)")
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "leak.txt"
    server, data, alice, bob = serve(tmp_path, {"hostile": hostile()})
    try:
        # A path no config names, handed to the server by code: its process may not write there.
        leak = run(alice, f"result = call_tool('hostile.remember', {{'text': 'x', 'path': {str(target)!r}}})")
        assert not leak["success"], leak
        assert "Permission denied" in leak["error"] or "Errno 13" in leak["error"], leak
        assert not target.exists()
        # Its own root it may.
        inside = tenant_root(data, "alice") / "upstream" / "hostile" / "mine.txt"
        ok = run(alice, f"result = call_tool('hostile.remember', {{'text': 'x', 'path': {str(inside)!r}}})")
        assert ok["success"], ok
        assert inside.read_text() == "x\n"
        # Another tenant's process cannot read it, nor anything else in the data directory.
        # ...nor the config file, which holds the tokens here.
        for path in [inside, tmp_path / "config.json"]:
            peek = run(bob, f"result = call_tool('hostile.recall', {{'path': {str(path)!r}}})")
            assert peek["success"], peek
            assert "Permission denied" in json.dumps(peek["result"]), (path, peek)
    finally:
        server.stop()


def test_server_memory_keeps_each_tenants_graph_apart(tmp_path: Path):
    # The README's own example: server-memory with its file in the tenant's directory keeps graphs apart; with its
    # default file (beside its code, shared by every process) a tenant's write is refused instead of shared.
    server, data, alice, bob = serve(tmp_path, {
        "memory": {"command": "node", "args": [MEMORY], "env": {"MEMORY_FILE_PATH": "${CEM_TENANT_DIR}/memory.jsonl"}},
        "default": {"command": "node", "args": [MEMORY]},
    })
    try:
        entity = {"entities": [{"name": "alice@example.com", "entityType": "person", "observations": ["likes tea"]}]}
        made = run(alice, f"result = call_tool('memory.create_entities', {entity!r})")
        assert made["success"], made
        graph = run(bob, "result = call_tool('memory.read_graph', {})")
        assert graph["success"], graph
        assert "likes tea" not in json.dumps(graph["result"]), graph
        assert "likes tea" in (tenant_root(data, "alice") / "upstream" / "memory" / "memory.jsonl").read_text()
        if landlock_enforced():
            default_file = Path(MEMORY).parent / "memory.jsonl"
            before = default_file.read_bytes() if default_file.exists() else None
            refused = run(alice, f"result = call_tool('default.create_entities', {entity!r})")
            assert not refused["success"], refused
            assert "EACCES" in refused["error"] or "permission denied" in refused["error"].lower(), refused
            # Refused by the confinement: the file beside the code is in no tenant's root.
            assert (default_file.read_bytes() if default_file.exists() else None) == before
    finally:
        server.stop()


def test_doctor_says_what_is_per_tenant_what_is_shared_and_which_paths_are_fixed(tmp_path: Path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"mcpServers": {
        "own": hostile({"HOSTILE_STATE_FILE": "${CEM_TENANT_DIR}/state.txt"}),
        "fixed": hostile({"HOSTILE_STATE_FILE": str(tmp_path / "state.txt")}),
        "together": hostile({"HOSTILE_STATE_FILE": str(tmp_path / "together.txt")}, shared=True),
    }}))
    out = run_cli("--config", str(config), "--data-dir", str(tmp_path / "data"), "doctor", "--json")
    checks = [c for c in json.loads(out.stdout)["checks"] if c["check"] == "tenancy"]
    details = " | ".join(c["detail"] for c in checks)
    assert "one process per tenant: fixed, own" in details, details
    assert "shared (one process and one state for every tenant): together" in details, details
    fixed = [c for c in checks if "fixed path" in c["detail"]]
    assert len(fixed) == 1 and fixed[0]["status"] == "warn", checks
    assert "fixed: env.HOSTILE_STATE_FILE" in fixed[0]["detail"] and "${CEM_TENANT_DIR}" in fixed[0]["detail"], fixed
