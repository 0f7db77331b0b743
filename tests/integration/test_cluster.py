"""Many nodes behind a plain round-robin balancer, state in PostgreSQL.

Real parts only: PostgreSQL and HAProxy from Debian's packages (tests/integration/cluster.py), three server
nodes of the real binary, each with its own data directory, sharing one store. Clients talk to the balancer
(and, where a test must pin a node, to one node directly) with raw stateless (2026-07-28) requests and with a
legacy MCP session.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx2 as httpx
import pytest

from cluster import Balancer, Postgres, free_port
from conftest import HttpServer, run_cli, start_http
from stateless import ACCEPT, META, body, message_of

TOKEN = "alice-cluster-token-0123456789"


@dataclass
class Deployment:
    pg: Postgres
    nodes: list[HttpServer]
    lb: Balancer
    tmp: Path

    def node_url(self, i: int) -> str:
        return self.nodes[i].url


def start_node(tmp: Path, pg: Postgres, name: str, extra: dict | None = None) -> HttpServer:
    data = tmp / name
    data.mkdir()
    port = free_port()
    config = tmp / f"{name}.json"
    config.write_text(json.dumps({"store": {"url": pg.url}, "auth": {"tokens": {"alice": TOKEN}}, **(extra or {})}))
    return start_http(data, "--node-url", f"http://127.0.0.1:{port}", addr=f"127.0.0.1:{port}", config=config)


def deploy(tmp: Path, n: int = 3, extra: dict | None = None):
    pg = Postgres.start(tmp)
    nodes: list[HttpServer] = []
    try:
        for i in range(n):
            nodes.append(start_node(tmp, pg, f"node{i + 1}", extra))
        lb = Balancer.start(tmp, [s.port for s in nodes])
    except BaseException:
        for s in nodes:
            s.stop()
        pg.stop()
        raise
    return Deployment(pg, nodes, lb, tmp)


def teardown(d: Deployment) -> None:
    d.lb.stop()
    for s in d.nodes:
        if s.proc.poll() is None:
            s.stop()
    d.pg.stop()


@pytest.fixture
def deployment(tmp_path: Path):
    d = deploy(tmp_path)
    yield d
    teardown(d)


def rpc(url: str, tool: str, args: dict | None = None, timeout: float = 60, **headers) -> tuple[dict, str]:
    """One stateless tools/call: (its result, the node that answered)."""
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": tool, "arguments": args or {}, "_meta": META}}
    h = {**ACCEPT, "Authorization": f"Bearer {TOKEN}", "MCP-Protocol-Version": "2026-07-28",
         "Mcp-Method": "tools/call", "Mcp-Name": tool, **headers}
    r = httpx.post(url, json=body, headers=h, timeout=timeout)
    assert r.status_code == 200, (r.status_code, r.text)
    return message_of(r)["result"], r.headers.get("cem-node", "")


def node_id(mcp_url: str) -> str:
    """The id a node shows in its `cem-node` header: a digest of its node URL, not the URL itself."""
    return hashlib.sha256(mcp_url.removesuffix("/mcp").encode()).hexdigest()[:12]


def text(result: dict) -> str:
    return "".join(c.get("text", "") for c in result["content"])


# --- one tenant, any node ----------------------------------------------------------------------------------------


def test_a_tenant_is_the_same_on_every_node(deployment: Deployment):
    d = deployment
    n1, n2, n3 = (d.node_url(i) for i in range(3))

    # A file written through one node reads through the others, and through the balancer whichever node it picks.
    result, node = rpc(n1, "write_workspace_file", {"filename": "notes/plan.txt", "content": "ship it"})
    assert body(result)["success"], result
    assert node == node_id(n1)
    for url in (n2, n3):
        assert body(rpc(url, "read_workspace_file", {"filename": "notes/plan.txt"})[0])["content"] == "ship it"
    answered = set()
    for _ in range(3):
        result, node = rpc(d.lb.url, "read_workspace_file", {"filename": "notes/plan.txt"})
        assert body(result)["content"] == "ship it"
        answered.add(node)
    assert len(answered) == 3, f"round robin should reach every node: {answered}"

    # Sandboxed code on another node sees the file, and what it writes is seen by a third.
    code = "result = open('notes/plan.txt').read().upper()\nopen('out.txt', 'w').write('from code')"
    result, _ = rpc(n3, "execute_code", {"code": code})
    assert body(result)["result"] == "SHIP IT", result
    assert body(rpc(n2, "read_workspace_file", {"filename": "out.txt"})[0])["content"] == "from code"

    # A skill saved through one node loads (and is importable by code) through another.
    result, _ = rpc(n1, "save_skill", {"name": "double", "description": "Doubles a number",
                                       "code": "def double(x):\n    return 2 * x\n"})
    assert body(result)["success"], result
    loaded = body(rpc(n2, "load_skill", {"name": "double"})[0])
    assert "return 2 * x" in loaded["code"]
    result, _ = rpc(n3, "execute_code", {"code": "from skills.double import double\nresult = double(21)"})
    assert body(result)["result"] == 42, result

    # A personal-data token issued by one node restores on another.
    sanitized = body(rpc(n1, "sanitize_pii", {"text": "mail jane.doe@example.com"})[0])
    token = sanitized["sanitized_text"].split()[-1]
    assert token.startswith("[EMAIL_"), sanitized
    restored = body(rpc(n2, "restore_pii", {"text": f"to {token}"})[0])
    assert restored["restored_text"] == "to jane.doe@example.com", restored

    # Deleting a file through one node removes it everywhere.
    rpc(n2, "execute_code", {"code": "import os\nos.remove('out.txt')"})
    listed = body(rpc(n1, "list_workspace_files", {})[0])
    assert "out.txt" not in json.dumps(listed), listed

    # Every node wrote its executions to the shared audit table.
    audited = d.pg.psql("SELECT count(DISTINCT node) FROM cem_audit WHERE tenant = 'token-alice' "
                        "AND record->>'event' = 'execution'")
    assert int(audited) == 2


def test_tokens_made_on_two_nodes_at_once_never_collide(deployment: Deployment):
    """Two nodes number tokens in the same vault concurrently; each token restores to its own value everywhere."""
    d = deployment
    values = [f"user{i}@example.com" for i in range(6)]
    out: dict[str, str] = {}

    def sanitize(url: str, value: str):
        out[value] = body(rpc(url, "sanitize_pii", {"text": value})[0])["sanitized_text"]

    threads = [threading.Thread(target=sanitize, args=(d.node_url(i % 2), v)) for i, v in enumerate(values)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(out.values())) == len(values), out
    for value, token in out.items():
        assert body(rpc(d.node_url(2), "restore_pii", {"text": token})[0])["restored_text"] == value


def test_an_interpreter_session_follows_the_client_across_nodes(deployment: Deployment):
    d = deployment
    result, holder = rpc(d.lb.url, "execute_code", {"code": "x = 41\nresult = x", "session_id": "s1"})
    assert body(result)["result"] == 41
    for expected in range(42, 47):
        result, node = rpc(d.lb.url, "execute_code", {"code": "x += 1\nresult = x", "session_id": "s1"})
        assert body(result)["result"] == expected, result
        # The node that holds the session answered, whichever one the balancer picked.
        assert node == holder
    picked = {line.split("nodes/")[1].split()[0] for line in d.lb.log_text().splitlines() if "nodes/" in line}
    assert len(picked) == 3, f"the balancer should have spread the calls: {picked}"


def test_a_dead_node_loses_only_its_sessions(deployment: Deployment):
    d = deployment
    n1, n2 = d.node_url(0), d.node_url(1)
    assert body(rpc(n1, "execute_code", {"code": "y = 'kept'", "session_id": "doomed"})[0])["success"]
    assert body(rpc(n2, "execute_code", {"code": "z = 'alive'", "session_id": "safe"})[0])["success"]
    rpc(n1, "write_workspace_file", {"filename": "survives.txt", "content": "still here"})
    rpc(n1, "save_skill", {"name": "keeper", "description": "Kept", "code": "def keep():\n    return 1\n"})
    sanitized = body(rpc(n1, "sanitize_pii", {"text": "call bob@example.org"})[0])["sanitized_text"]
    legacy = {**ACCEPT, "Authorization": f"Bearer {TOKEN}"}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}
    legacy["Mcp-Session-Id"] = httpx.post(n1, json=init, headers=legacy, timeout=30).headers["mcp-session-id"]
    legacy["MCP-Protocol-Version"] = "2025-11-25"

    # A long call of the doomed session is under way on node 1 when it dies.
    mid_run: dict = {}

    def long_call():
        try:
            mid_run["answer"] = rpc(n1, "execute_code", {"code": "import time\ntime.sleep(20)", "session_id": "doomed"})
        except Exception as e:  # the connection breaks
            mid_run["error"] = e

    t = threading.Thread(target=long_call)
    t.start()
    time.sleep(1.5)
    d.nodes[0].stop(sig=9)
    t.join(timeout=15)
    assert not t.is_alive(), "a call to a node that died must not hang"
    assert "error" in mid_run, mid_run
    d.lb.wait_server("n1", "DOWN")

    result, _ = rpc(d.lb.url, "execute_code", {"code": "result = y", "session_id": "doomed"})
    assert result.get("isError") is True
    assert "was lost" in text(result) and "Start again" in text(result), result
    assert node_id(n1) in text(result) and "127.0.0.1" not in text(result), "the node is named by its id only"
    # A legacy MCP session of the dead node is, to the client, an unknown session: 404, start a new one.
    r = httpx.post(n2, json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"}, headers=legacy, timeout=30)
    assert r.status_code == 404 and "start a new session" in r.text, (r.status_code, r.text)
    # Asked again, the name starts a new session on a live node.
    result, _ = rpc(d.lb.url, "execute_code", {"code": "result = 'fresh'", "session_id": "doomed"})
    assert body(result)["result"] == "fresh", result

    # Everything else is intact, through any node that is left.
    for _ in range(2):
        assert body(rpc(d.lb.url, "execute_code", {"code": "result = z", "session_id": "safe"})[0])["result"] == "alive"
        assert body(rpc(d.lb.url, "read_workspace_file", {"filename": "survives.txt"})[0])["content"] == "still here"
        assert "def keep" in body(rpc(d.lb.url, "load_skill", {"name": "keeper"})[0])["code"]
        restored = body(rpc(d.lb.url, "restore_pii", {"text": sanitized})[0])["restored_text"]
        assert restored == "call bob@example.org"


def test_two_nodes_saving_one_skill_at_once_get_versions_1_and_2(deployment: Deployment):
    d = deployment
    barrier = threading.Barrier(2)
    saved: list = []

    def save(i: int):
        barrier.wait()
        result, _ = rpc(d.node_url(i), "save_skill", {"name": "race", "description": f"Writer {i}",
                                                        "code": f"def race():\n    return {i}\n"})
        saved.append((body(result)["version"], i))

    threads = [threading.Thread(target=save, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    writers = dict(saved)
    assert sorted(writers) == [1, 2], saved
    loaded = body(rpc(d.node_url(2), "load_skill", {"name": "race"})[0])
    assert loaded["version"] == 2 and loaded["versions"] == [1, 2], loaded
    assert f"return {writers[2]}" in loaded["code"] and loaded["description"] == f"Writer {writers[2]}"
    first = body(rpc(d.node_url(2), "load_skill", {"name": "race", "version": 1})[0])
    assert f"return {writers[1]}" in first["code"], first


def test_a_legacy_session_works_through_the_balancer(deployment: Deployment):
    d = deployment
    h = {**ACCEPT, "Authorization": f"Bearer {TOKEN}"}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}
    r = httpx.post(d.lb.url, json=init, headers=h, timeout=30)
    assert r.status_code == 200, r.text
    sid = r.headers["mcp-session-id"]
    home = r.headers["cem-node"]
    h = {**h, "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}
    r = httpx.post(d.lb.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=h, timeout=30)
    assert r.status_code == 202, r.text
    for i in range(4):
        call = {"jsonrpc": "2.0", "id": 10 + i, "method": "tools/call",
                "params": {"name": "execute_code", "arguments": {"code": f"n = {i}\nresult = n", "session_id": "legacy"}}}
        r = httpx.post(d.lb.url, json=call, headers=h, timeout=60)
        assert r.status_code == 200, r.text
        assert r.headers["cem-node"] == home
        assert body(message_of(r)["result"])["result"] == i
    # Ended on whichever node holds it, relayed or not: 204, as a single node answers.
    r = httpx.delete(d.lb.url, headers=h, timeout=30)
    assert r.status_code == 204, (r.status_code, r.text)
    assert r.headers["cem-node"] == home


def test_quotas_hold_across_nodes(tmp_path: Path):
    d = deploy(tmp_path, n=2, extra={"quotas": {"executions_per_minute": 3}})
    try:
        answers = [rpc(d.lb.url, "execute_code", {"code": "result = 1"}) for _ in range(4)]
        assert {node for _, node in answers} == {node_id(d.node_url(0)), node_id(d.node_url(1))}
        assert [a[0].get("isError", False) for a in answers] == [False, False, False, True]
        assert "quotas.executions_per_minute is 3" in text(answers[3][0])
    finally:
        teardown(d)


def test_health_endpoints_and_the_internal_endpoint_refuse_clients(deployment: Deployment):
    d = deployment
    base = d.node_url(0).removesuffix("/mcp")
    assert httpx.get(f"{base}/healthz", timeout=5).status_code == 200
    assert httpx.get(f"{base}/readyz", timeout=5).status_code == 200
    # A client token is no key for the internal endpoint.
    r = httpx.post(f"{base}/internal/mcp", json={}, headers={**ACCEPT, "Authorization": f"Bearer {TOKEN}"}, timeout=5)
    assert r.status_code == 403
    # And the balancer does not even pass it on.
    lb_base = d.lb.url.removesuffix("/mcp")
    assert httpx.post(f"{lb_base}/internal/mcp", json={}, headers=ACCEPT, timeout=5).status_code == 404
    # doctor reports the store and the nodes on it.
    def doctor() -> tuple[int, dict]:
        out = run_cli("--data-dir", str(d.tmp / "node1"), "--config", str(d.tmp / "node1.json"), "doctor", "--json",
                      timeout=120)
        return out.returncode, next(c for c in json.loads(out.stdout)["checks"] if c["check"] == "store")

    code, store = doctor()
    assert store["status"] == "ok" and "schema version 5" in store["detail"], store
    assert all(n.url.removesuffix("/mcp") in store["detail"] for n in d.nodes), store
    # Without its store a node is alive but not ready, so the balancer stops sending it requests.
    d.pg.stop()
    assert httpx.get(f"{base}/healthz", timeout=5).status_code == 200
    assert httpx.get(f"{base}/readyz", timeout=10).status_code == 503
    code, store = doctor()
    assert code == 1 and store["status"] == "fail" and "cannot be reached" in store["detail"], store


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.anyio
async def test_an_approval_answered_through_another_node_reaches_the_paused_execution(tmp_path: Path):
    """The 2026-07-28 input-required flow through the balancer: the question comes from the node running the code,
    the client's retry (the next request, so another node in round robin) is relayed to it."""
    from mcp import Client, types
    from mcp.client.streamable_http import streamable_http_client

    from test_upstream import MEMORY

    # In a directory of its own: the tenant's process may write there (server-memory writes a temporary file beside
    # the graph and renames it over it), and nowhere else; beside the nodes' data directories only the file would be.
    (tmp_path / "graph").mkdir()
    graph = tmp_path / "graph" / "memory.json"
    extra = {"mcpServers": {"memory": {"command": "node", "args": [MEMORY], "env": {"MEMORY_FILE_PATH": str(graph)}}},
             "policy": {"rules": {"memory.create_entities": "ask"}}}
    d = deploy(tmp_path, n=3, extra=extra)
    questions = []

    async def human(context, params):
        questions.append(params)
        return types.ElicitResult(action="accept", content={"decision": "allow_once"})

    code = ('call_tool("memory.create_entities", {"entities": [{"name": "ada", "entityType": "person", '
            '"observations": ["first"]}]})\nresult = "done"')
    try:
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"},
                                     timeout=httpx.Timeout(30, read=120)) as http:
            async with Client(streamable_http_client(d.lb.url, http_client=http), elicitation_callback=human) as client:
                for _ in range(2):
                    result = await client.call_tool("execute_code", {"code": code})
                    assert not result.is_error, result
                    assert result.structured_content["result"] == "done"
        assert len(questions) == 2
        assert "ada" in graph.read_text()
        relayed = d.pg.psql("SELECT count(*) FROM cem_sessions WHERE kind = 'paused'")
        assert relayed == "0", "answered questions leave no record behind"

        # The pins the first node took and the tool list reach every node (mirrored every few seconds), so each
        # checks the server against the same trusted digests.
        def shared(sub: str) -> list[dict]:
            return [{p.name: json.loads(p.read_text()) for p in (tmp_path / f"node{i}" / sub).glob("*.json")}
                    for i in (1, 2, 3)]

        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            pins, lists = shared("policy/pins"), shared("cache/tools")
            if all("memory.json" in p for p in pins) and all(lists) and pins[0] == pins[1] == pins[2] \
                    and lists[0] == lists[1] == lists[2]:
                break
            time.sleep(0.5)
        else:
            raise AssertionError(f"pins and tool lists did not converge: {pins} {lists}")
        assert d.pg.psql("SELECT count(*) FROM cem_pins WHERE server = 'memory'") == "1"
    finally:
        teardown(d)


def test_three_nodes_started_at_the_same_instant_on_an_empty_store_all_come_up(tmp_path: Path):
    # Orchestrators start replicas together. Each round is a fresh, empty database; the three nodes are
    # released by one barrier, so their migrations meet on the empty schema.
    pg = Postgres.start(tmp_path)
    try:
        for round_ in range(10):
            db = f"race{round_}"
            pg._client("createdb", db)
            url = pg.url.rsplit("/", 1)[0] + f"/{db}"
            gate = threading.Barrier(3)
            started: list[HttpServer | BaseException] = [None, None, None]  # type: ignore[list-item]

            def start(i: int) -> None:
                data = tmp_path / f"r{round_}n{i}"
                data.mkdir()
                config = tmp_path / f"r{round_}n{i}.json"
                config.write_text(json.dumps({"store": {"url": url}, "auth": {"tokens": {"alice": TOKEN}}}))
                port = free_port()
                gate.wait()
                try:
                    started[i] = start_http(data, "--node-url", f"http://127.0.0.1:{port}",
                                            addr=f"127.0.0.1:{port}", config=config)
                except BaseException as e:  # noqa: BLE001 - reported below with the round
                    started[i] = e

            threads = [threading.Thread(target=start, args=(i,)) for i in range(3)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            try:
                failed = [s for s in started if isinstance(s, BaseException)]
                assert not failed, f"round {round_}: {failed[0]}"
                for s in started:
                    assert s.proc.poll() is None, f"round {round_}: a node exited: {s.log_text()}"
                    answer, _ = rpc(s.url, "execute_code", {"code": "result = 6 * 7"})
                    assert body(answer)["result"] == 42
                assert pg._client("psql", "-d", db, "-At", "-c", "SELECT count(*) FROM cem_nodes").strip() == "3"
            finally:
                for s in started:
                    if isinstance(s, HttpServer):
                        s.stop()
    finally:
        pg.stop()


@pytest.mark.anyio
async def test_a_cancelled_execution_s_files_reach_the_other_nodes(deployment: Deployment):
    """Code that wrote a file and was then cancelled: its node still pushes the file to the store, so another
    node serves it, and the execution is in the shared audit trail as cancelled."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    d = deployment
    code = "open('made-before-cancel.txt', 'w').write('kept')\nimport time\ntime.sleep(60)"
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"},
                                 timeout=httpx.Timeout(30, read=120)) as http:
        async with Client(streamable_http_client(d.node_url(0), http_client=http)) as client:
            with anyio.move_on_after(3):
                await client.call_tool("execute_code", {"code": code})
    deadline = time.monotonic() + 20
    while True:
        read, _ = rpc(d.node_url(1), "read_workspace_file", {"filename": "made-before-cancel.txt"})
        if not read.get("isError"):
            break
        assert time.monotonic() < deadline, f"the cancelled execution's file never reached node 2: {text(read)}"
        time.sleep(0.5)
    assert body(read)["content"] == "kept"
    outcomes = d.pg.psql("SELECT record->>'outcome' FROM cem_audit WHERE record->>'event' = 'execution'")
    assert outcomes.split() == ["cancelled"], outcomes


def rows_once(d: Deployment, sql: str, ready, wait: float = 20) -> str:
    """What `sql` gives once `ready` holds for it (the store is written from tasks), or after `wait` s."""
    deadline = time.monotonic() + wait
    while True:
        rows = d.pg.psql(sql)
        if ready(rows) or time.monotonic() >= deadline:
            return rows
        time.sleep(0.2)


def test_what_search_learned_on_one_node_ranks_on_another(tmp_path: Path):
    from conftest import SERVERS_PYTHON
    from test_search_learning import NEED

    git = {"git": {"command": str(SERVERS_PYTHON), "args": ["-m", "mcp_server_git"]}}
    d = deploy(tmp_path, n=2, extra={"mcpServers": git})
    try:
        n1, n2 = d.node_url(0), d.node_url(1)
        search = {"query": NEED, "detail_level": "name", "limit": 10}
        before = body(rpc(n1, "search_tools", search)[0])["tools"]
        assert before[0] != "git.git_log" and "git.git_log" in before, before
        assert body(rpc(n1, "get_tool_definition", {"tool_name": "git.git_log"})[0])["success"]
        # The store is written from a task of its own: a slow store never holds up the call.
        rows = rows_once(d, "SELECT words || ' -> ' || tool FROM cem_learned WHERE tenant = 'token-alice'",
                         lambda rows: rows.strip())
        assert rows.strip() == "who changed what lately -> git.git_log", rows
        # The other node never saw the search or the use: it ranks with the store's records.
        after = body(rpc(n2, "search_tools", search)[0])["tools"]
        assert after[0] == "git.git_log", after
    finally:
        teardown(d)


def test_a_search_on_one_node_learns_from_a_use_on_another(tmp_path: Path):
    # A stateless client (protocol 2026-07-28) has no session that pins it to a node: its search may
    # reach one node and its next request, the use of what it found, another.
    from conftest import SERVERS_PYTHON

    git = {"git": {"command": str(SERVERS_PYTHON), "args": ["-m", "mcp_server_git"]}}
    d = deploy(tmp_path, n=2, extra={"mcpServers": git})
    try:
        n1, n2 = d.node_url(0), d.node_url(1)
        query = "who touched the code recently"
        found = body(rpc(n1, "search_tools", {"query": query, "detail_level": "name", "limit": 10})[0])["tools"]
        assert "git.git_log" in found, found
        for _ in range(2):  # read twice: one use, as a loop of calls is
            assert body(rpc(n2, "get_tool_definition", {"tool_name": "git.git_log"})[0])["success"]
        learned = ("SELECT words || ' -> ' || tool || ' ' || weight FROM cem_learned"
                   " WHERE tenant = 'token-alice' ORDER BY tool")
        rows = rows_once(d, learned, lambda rows: rows.strip())
        assert rows.strip() == "who touched the code recently -> git.git_log 1", rows
        # Another tool used after the same search, on both nodes: recorded once.
        assert body(rpc(n1, "get_tool_definition", {"tool_name": "git.git_status"})[0])["success"]
        assert body(rpc(n2, "get_tool_definition", {"tool_name": "git.git_status"})[0])["success"]
        rows = rows_once(d, learned, lambda rows: "git_status" in rows)
        assert rows.split("\n") == ["who touched the code recently -> git.git_log 1",
                                     "who touched the code recently -> git.git_status 1"], rows
    finally:
        teardown(d)


def test_a_shape_learned_on_one_node_types_the_definition_on_another(tmp_path: Path):
    from test_shapes import PERSONAL, RECORDS
    from conftest import SDK1_PYTHON

    records = {"records": {"command": str(SDK1_PYTHON), "args": [RECORDS]}}
    d = deploy(tmp_path, n=2, extra={"mcpServers": records})
    try:
        n1, n2 = d.node_url(0), d.node_url(1)
        ran = body(rpc(n1, "execute_code", {"code": "from servers.records import invoices\n"
                                                    "result = len(invoices(customer=2)['invoices'])"})[0])
        assert ran["success"] and ran["result"] == 2, ran
        # Shared from a task of its own: each node's own row, keyed by the node.
        rows = rows_once(d, "SELECT tool || ' ' || (learned->>'calls') FROM cem_shapes WHERE tenant = 'token-alice'",
                         lambda rows: rows.strip())
        assert rows.strip() == "records.invoices 1", rows
        stored = d.pg.psql("SELECT learned::text FROM cem_shapes")
        for value in PERSONAL:
            assert value not in stored, value
        # The other node never called the tool: its definition is typed from the store.
        other = body(rpc(n2, "get_tool_definition", {"tool_name": "records.invoices"})[0])
        assert other["returns"] == {"source": "learned", "calls": 1, "probes": 0}, other
        assert not other["python"]["signature"].endswith("-> Any"), other
        # Its own call adds to what the first node saw, counted once each.
        assert body(rpc(n2, "execute_code", {"code": "from servers.records import invoices\n"
                                                     "result = invoices(customer=1)['customer_name'] != ''"})[0])["result"]
        both = body(rpc(n2, "get_tool_definition", {"tool_name": "records.invoices"})[0])
        assert both["returns"]["calls"] == 2, both
    finally:
        teardown(d)
