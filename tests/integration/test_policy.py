"""Policy, approvals and audit for tool calls from code, with real clients and real upstreams.

server-memory's create_entities is the write under test: a rule makes it `ask`, and the graph file
(MEMORY_FILE_PATH) shows whether anything reached the server. The questions are answered by the
Python SDK's elicitation callback, over the 2026-07-28 input-required flow (the default mode) and
over elicitation/create (legacy mode).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client, types

from conftest import SDK1_PYTHON, run_cli, start_http, stdio_params
from test_upstream import FILESYSTEM, MEMORY

pytestmark = pytest.mark.anyio

CHANGING = str(Path(__file__).parent / "servers" / "changing_server.py")
EMAIL = "ana.lima@example.com"
PHONE = "+1 415 555 2671"


@pytest.fixture
def anyio_backend():
    return "asyncio"


def write_config(tmp_path: Path, policy: dict | None = None) -> Path:
    root = tmp_path / "fsroot"
    root.mkdir(exist_ok=True)
    (root / "hello.txt").write_text("hello")
    version = tmp_path / "version.txt"
    if not version.exists():
        version.write_text("v1")
    config = {
        "mcpServers": {
            "memory": {"command": "node", "args": [MEMORY], "env": {"MEMORY_FILE_PATH": str(tmp_path / "memory.json")}},
            "filesystem": {"command": "node", "args": [FILESYSTEM, str(root)]},
            "changing": {"command": str(SDK1_PYTHON), "args": [CHANGING],
                         "env": {"CHANGING_VERSION_FILE": str(version), "CHANGING_NOTES_FILE": str(tmp_path / "notes.txt")}},
        },
        "policy": policy if policy is not None else {"rules": {"memory.create_entities": "ask"}},
    }
    path = tmp_path / "mcp_config.json"
    path.write_text(json.dumps(config))
    return path


class Human:
    """An elicitation callback that gives fixed answers and remembers the questions."""

    def __init__(self, decision: str | None, action: str = "accept"):
        self.decision, self.action, self.questions = decision, action, []

    async def __call__(self, context, params):
        self.questions.append(params)
        content = {"decision": self.decision} if self.action == "accept" else None
        return types.ElicitResult(action=self.action, content=content)


def client(data_dir: Path, config: Path, human: Human | None = None, mode: str = "auto") -> Client:
    params = stdio_params(data_dir)
    params.args = ["--config", str(config), *params.args]
    if human is None:
        return Client(params, mode=mode)
    return Client(params, mode=mode, elicitation_callback=human)


def entity_code(n: int = 1, start: int = 0) -> str:
    return f"""
done = 0
for i in range({start}, {start + n}):
    call_tool("memory.create_entities", {{"entities": [{{"name": f"person{{i}}", "entityType": "person",
        "observations": ["{EMAIL}", "{PHONE}"]}}]}})
    done += 1
result = done
"""


async def run(c: Client, code: str) -> dict:
    answer = await c.call_tool("execute_code", {"code": code, "timeout_seconds": 60})
    return answer.structured_content


def graph(tmp_path: Path) -> list[str]:
    path = tmp_path / "memory.json"
    if not path.exists():
        return []
    return [json.loads(line)["name"] for line in path.read_text().splitlines() if line.strip()]


def audit_lines(data_dir: Path) -> list[dict]:
    path = data_dir / "audit" / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_denial_reaches_the_code_and_nothing_reaches_the_upstream(data_dir: Path, tmp_path: Path, mode: str):
    human = Human("deny")
    code = """
try:
    call_tool("memory.create_entities", {"entities": [{"name": "x", "entityType": "t", "observations": []}]})
    result = "called"
except ToolError as e:
    result = str(e)
"""
    async with client(data_dir, write_config(tmp_path), human, mode) as c:
        body = await run(c, code)
    assert body["success"], body
    assert "the user denied the call of memory.create_entities" in body["result"], body
    assert graph(tmp_path) == []
    assert len(human.questions) == 1
    question = human.questions[0]
    assert "memory.create_entities" in question.message and "Create multiple new entities" in question.message
    assert question.requested_schema["properties"]["decision"]["oneOf"][0]["const"] == "allow_once"
    asked = [line for line in audit_lines(data_dir) if line["event"] == "decision"]
    route = "input-required elicitation" if mode == "auto" else "user via elicitation"
    assert asked[-1]["answer"] == "deny" and route in asked[-1]["answered_by"], asked


async def test_decline_and_cancel_are_denials(data_dir: Path, tmp_path: Path):
    for action in ("decline", "cancel"):
        human = Human(None, action=action)
        async with client(data_dir, write_config(tmp_path), human) as c:
            body = await run(c, entity_code())
        assert not body["success"] and "denied" in body["error"], body
    assert graph(tmp_path) == []


async def test_allow_once_asks_again_on_the_next_call(data_dir: Path, tmp_path: Path):
    human = Human("allow_once")
    async with client(data_dir, write_config(tmp_path), human) as c:
        body = await run(c, entity_code(3))
    assert body["success"] and body["result"] == 3, body
    assert len(human.questions) == 3
    assert "2 earlier call(s)" in human.questions[2].message
    assert graph(tmp_path) == ["person0", "person1", "person2"]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_allow_for_the_execution_asks_once_in_a_loop_of_20(data_dir: Path, tmp_path: Path, mode: str):
    human = Human("allow_execution")
    async with client(data_dir, write_config(tmp_path), human, mode) as c:
        body = await run(c, entity_code(20))
        assert body["success"] and body["result"] == 20, body
        assert len(human.questions) == 1
        # The next execution asks again.
        body = await run(c, entity_code(1, start=20))
        assert body["success"], body
    assert len(human.questions) == 2
    assert len(graph(tmp_path)) == 21


async def test_allow_for_the_session_covers_later_executions_of_that_session_only(data_dir: Path, tmp_path: Path):
    human = Human("allow_session")
    config = write_config(tmp_path)
    async with client(data_dir, config, human) as c:
        for start in (0, 5):
            body = await run(c, entity_code(5, start))
            assert body["success"], body
    assert len(human.questions) == 1
    other = Human("deny")
    async with client(data_dir, config, other) as c:
        body = await run(c, entity_code(1, start=10))
    assert not body["success"] and len(other.questions) == 1, body
    assert len(graph(tmp_path)) == 10


async def test_a_client_without_elicitation_is_refused_with_words_to_act_on(data_dir: Path, tmp_path: Path):
    async with client(data_dir, write_config(tmp_path)) as c:
        body = await run(c, entity_code())
    assert not body["success"], body
    error = body["error"]
    assert "refused (fail closed)" in error and 'rule "memory.create_entities"' in error, error
    assert '"memory.create_entities": "allow"' in error and "did not declare the MCP elicitation capability" in error
    assert graph(tmp_path) == []


async def test_budgets_stop_a_runaway_loop(data_dir: Path, tmp_path: Path):
    config = write_config(tmp_path, {"budgets": {"memory.*": 5}})
    async with client(data_dir, config) as c:
        body = await run(c, entity_code(50))
    assert not body["success"], body
    assert 'the budget "memory.*" of 5 call(s) per execution is used up' in body["error"], body
    assert len(graph(tmp_path)) == 5


async def test_rules_override_annotations(data_dir: Path, tmp_path: Path):
    # delete_entities says destructiveHint: asked by default, allowed by the rule;
    # read_text_file says readOnlyHint: allowed by default, denied by the rule.
    config = write_config(tmp_path, {"rules": {"memory.delete_entities": "allow", "filesystem.read_*": "deny"}})
    code = f"""
call_tool("memory.create_entities", {{"entities": [{{"name": "a", "entityType": "t", "observations": []}}]}})
call_tool("memory.delete_entities", {{"entityNames": ["a"]}})
try:
    call_tool("filesystem.read_text_file", {{"path": "{tmp_path / 'fsroot' / 'hello.txt'}"}})
    result = "read"
except ToolError as e:
    result = str(e)
"""
    async with client(data_dir, config) as c:
        body = await run(c, code)
        assert body["success"], body
        assert 'the policy denies filesystem.read_text_file (rule "filesystem.read_*")' in body["result"], body
        # Without the rule, the annotation asks (and this client cannot be asked).
    async with client(data_dir, write_config(tmp_path, {})) as c:
        body = await run(c, 'call_tool("memory.delete_entities", {"entityNames": ["a"]})')
    assert not body["success"] and "annotation destructiveHint" in body["error"], body


async def test_a_tool_that_changed_since_it_was_pinned_asks_until_accepted(data_dir: Path, tmp_path: Path):
    config = write_config(tmp_path, {})
    note = 'call_tool("changing.send_note", {"text": "hi"}); result = "sent"'
    async with client(data_dir, config) as c:
        assert (await run(c, note))["result"] == "sent"
    (tmp_path / "version.txt").write_text("v2")
    async with client(data_dir, config) as c:
        body = await run(c, note)
    assert not body["success"], body
    assert "changed since it was pinned" in body["error"] and "policy accept changing.send_note" in body["error"], body
    env = {"CODE_EXECUTION_MCP_DATA_DIR": str(data_dir)}
    review = run_cli("--config", str(config), "policy", "review", env=env, timeout=60)
    assert review.returncode == 1, review.stderr
    assert "changing.send_note: CHANGED (description, inputSchema)" in review.stdout, review.stdout
    assert '+ "bcc"' in review.stdout.replace("  ", " ") or "bcc" in review.stdout, review.stdout
    doctor = run_cli("--config", str(config), "doctor", env=env, timeout=120)
    assert "changing: 1 tools; 1 tool(s) changed since pinned (changing.send_note)" in doctor.stdout, doctor.stdout
    accepted = run_cli("--config", str(config), "policy", "accept", "changing.send_note", env=env, timeout=60)
    assert accepted.returncode == 0, accepted.stderr
    assert run_cli("--config", str(config), "policy", "review", env=env, timeout=60).returncode == 0
    async with client(data_dir, config) as c:
        assert (await run(c, note))["result"] == "sent"
    assert (tmp_path / "notes.txt").read_text().splitlines() == ["hi", "hi bcc="]


async def test_on_change_deny_refuses_a_changed_tool_even_with_a_human(data_dir: Path, tmp_path: Path):
    config = write_config(tmp_path, {"on_change": "deny"})
    note = 'call_tool("changing.send_note", {"text": "hi"}); result = "sent"'
    async with client(data_dir, config) as c:
        assert (await run(c, note))["result"] == "sent"
    (tmp_path / "version.txt").write_text("v2")
    human = Human("allow_once")
    async with client(data_dir, config, human) as c:
        body = await run(c, note)
    assert not body["success"] and "the policy denies changing.send_note" in body["error"], body
    assert human.questions == []


async def test_the_audit_log_holds_every_call_and_decision_without_personal_data(data_dir: Path, tmp_path: Path):
    human = Human("allow_execution")
    async with client(data_dir, write_config(tmp_path), human) as c:
        body = await run(c, entity_code(3) + '\ncall_tool("memory.read_graph", {})')
        assert body["success"], body
        denied = await run(c, 'call_tool("memory.open_nodes", {"names": ["x"]})')
        assert denied["success"], denied
    text = (data_dir / "audit" / "audit.jsonl").read_text()
    for secret in (EMAIL, "555 2671", "4155552671"):
        assert secret not in text
    lines = audit_lines(data_dir)
    calls = [line for line in lines if line["event"] == "call"]
    decisions = [line for line in lines if line["event"] == "decision"]
    executions = [line for line in lines if line["event"] == "execution"]
    assert [c["tool"] for c in calls] == ["memory.create_entities"] * 3 + ["memory.read_graph", "memory.open_nodes"]
    assert all(c["ok"] and c["args_digest"].startswith("sha256:") and c["args_bytes"] > 0 for c in calls)
    asked = [d for d in decisions if d["asked"]]
    assert len(asked) == 1 and asked[0]["answer"] == "allow_execution" and "elicitation" in asked[0]["answered_by"]
    assert asked[0]["rule"] == "memory.create_entities" and asked[0]["decision"] == "ask"
    assert [d["outcome"] for d in decisions] == ["allowed"] * 5
    assert len(executions) == 2 and executions[0]["tool_calls"] == 4 and executions[0]["code_digest"].startswith("sha256:")
    assert len({line["exec"] for line in calls[:4]}) == 1
    shown = run_cli("audit", "--tool", "memory.create_*", "--event", "call", "-n", "2", env={"CODE_EXECUTION_MCP_DATA_DIR": str(data_dir)})
    assert shown.returncode == 0 and len(shown.stdout.splitlines()) == 2, shown
    asked_cli = run_cli("audit", "--decision", "allow_execution", "--json", env={"CODE_EXECUTION_MCP_DATA_DIR": str(data_dir)})
    assert [json.loads(line)["tool"] for line in asked_cli.stdout.splitlines()] == ["memory.create_entities"] * 3


async def test_an_unwritable_audit_log_fails_the_call(data_dir: Path, tmp_path: Path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    config = write_config(tmp_path, {"audit": {"path": str(blocker / "audit.jsonl")}})
    async with client(data_dir, config) as c:
        body = await run(c, 'call_tool("memory.read_graph", {})')
    assert not body["success"] and "could not be recorded" in body["error"], body


def test_tools_call_from_the_cli_follows_the_policy(data_dir: Path, tmp_path: Path):
    config = write_config(tmp_path)
    env = {"CODE_EXECUTION_MCP_DATA_DIR": str(data_dir)}
    args = json.dumps({"entities": [{"name": "cli", "entityType": "t", "observations": []}]})
    refused = run_cli("--config", str(config), "tools", "call", "memory.create_entities", "--args", args, env=env, timeout=60)
    assert refused.returncode == 1 and "no terminal to ask on" in refused.stderr, refused.stderr
    assert graph(tmp_path) == []
    lines = audit_lines(data_dir)
    assert lines[-1]["caller"] == "cli" and lines[-1]["outcome"] == "refused"


FAULT = str(Path(__file__).parent / "servers" / "fault_server.py")


def fault_config(tmp_path: Path, policy: dict, extra_tools: str = "") -> Path:
    config = {
        "mcpServers": {"fault": {"command": str(SDK1_PYTHON), "args": [FAULT], "env": {"FAULT_EXTRA_TOOLS": extra_tools}}},
        "policy": policy,
    }
    path = tmp_path / "fault_config.json"
    path.write_text(json.dumps(config))
    return path


def outcome_of(call: str) -> str:
    return f"""
try:
    result = {call}
except ToolError as e:
    result = "refused: " + str(e)
"""


async def test_rules_written_with_the_python_names_cover_tools_with_awkward_names(data_dir: Path, tmp_path: Path):
    # The generated wrappers name `delete.repo` delete_repo, `import` import_ and `drop table`
    # drop_table: a rule written with those names must cover the tools, by any spelling the
    # code uses to call them.
    config = fault_config(
        tmp_path,
        {"rules": {"fault.delete_repo": "deny", "fault.import_": "deny", "fault.drop_table": "deny", "fault.*": "allow"}},
        "delete.repo,import,drop table,keep.me",
    )
    calls = {
        'call_tool("fault.delete.repo", {})': "fault.delete_repo",
        'call_tool("fault.delete_repo", {})': "fault.delete_repo",
        'call_tool("fault.import_", {})': "fault.import_",
        'call_tool("fault.import", {})': "fault.import_",
        'call_tool("fault.drop table", {})': "fault.drop_table",
        'call_tool("fault.drop_table", {})': "fault.drop_table",
    }
    async with client(data_dir, config) as c:
        for call, rule in calls.items():
            body = await run(c, outcome_of(call))
            assert body["success"], body
            assert "the policy denies" in body["result"] and f'rule "{rule}"' in body["result"], (call, body)
        kept = await run(c, outcome_of('call_tool("fault.keep_me", {})'))
    assert kept["result"] == "keep.me", kept


async def test_a_made_up_tool_name_is_refused_as_unknown_with_the_closest_names(data_dir: Path, tmp_path: Path):
    # Not "needs approval" for a tool that "appeared since pinned": a misspelt name is the
    # usual cause, and the agent needs the right one. A megabyte name from code must neither
    # come back whole nor reach the audit log, where a loop of them would push older lines out.
    config = fault_config(tmp_path, {"rules": {"fault.*": "allow"}})
    async with client(data_dir, config) as c:
        misspelt = await run(c, outcome_of('call_tool("fault.slep", {"seconds": 0})'))
        huge = await run(c, outcome_of('call_tool("fault." + "a" * 1_000_000, {})'))
    result = misspelt["result"]
    assert "fault has no tool named 'slep'; closest: fault.sleep" in result and "search_tools" in result, result
    assert "approval" not in result and "policy accept" not in result, result
    result = huge["result"]
    assert "fault has no tool named 'aaa" in result and "(1000000 bytes)" in result and len(result) < 2000, result[:300]
    audit = data_dir / "audit" / "audit.jsonl"
    assert not audit.exists() or audit.stat().st_size < 10_000


async def test_a_call_cut_off_by_the_execution_timeout_is_still_audited(data_dir: Path, tmp_path: Path):
    config = fault_config(tmp_path, {"rules": {"fault.*": "allow"}})
    async with client(data_dir, config) as c:
        answer = await c.call_tool("execute_code", {"code": 'call_tool("fault.sleep", {"seconds": 30})', "timeout_seconds": 2})
    body = answer.structured_content
    assert not body["success"], body
    calls = [line for line in audit_lines(data_dir) if line["event"] == "call"]
    assert [c["tool"] for c in calls] == ["fault.sleep"], calls
    assert calls[0]["ok"] is False and "no answer" in calls[0]["error"], calls


async def test_over_stateless_http_allow_for_the_session_is_not_offered_and_lasts_one_execution(data_dir: Path, tmp_path: Path):
    # Stateless requests (protocol 2026-07-28) have no session: every client of the person shares
    # one key, and nothing ends it. A grant "for this session" would cover other clients, forever.
    server = start_http(data_dir, config=write_config(tmp_path))
    try:
        human = Human("allow_session")
        async with Client(server.url, elicitation_callback=human) as c:
            for start in (0, 1):
                body = await run(c, entity_code(1, start))
                assert body["success"], body
        assert len(human.questions) == 2, "each execution asks again"
        choices = [c["const"] for c in human.questions[0].requested_schema["properties"]["decision"]["oneOf"]]
        assert choices == ["allow_once", "allow_execution", "deny"], choices
        other = Human("deny")
        async with Client(server.url, elicitation_callback=other) as c:
            body = await run(c, entity_code(1, start=2))
        assert not body["success"] and len(other.questions) == 1, body
    finally:
        server.stop()
    assert graph(tmp_path) == ["person0", "person1"]
    answers = [line["answer"] for line in audit_lines(data_dir) if line["event"] == "decision" and line["asked"]]
    assert answers == ["allow_execution", "allow_execution", "deny"], answers


def test_a_config_naming_a_rule_twice_is_refused(tmp_path: Path):
    config = tmp_path / "mcp_config.json"
    config.write_text('{"policy": {"rules": {\n  "memory.create_entities": "deny",\n  "memory.create_entities": "allow"\n}}}')
    checked = run_cli("--config", str(config), "tools", "list", env={"CODE_EXECUTION_MCP_DATA_DIR": str(tmp_path / "d")})
    assert checked.returncode != 0, checked.stdout
    assert '"memory.create_entities" appears twice in one object' in checked.stderr and "line 3" in checked.stderr, checked.stderr


class SlowHuman(Human):
    """Answers after `seconds`, noting how much a heartbeat file grew while the question was open."""

    def __init__(self, decision: str, beat: Path, seconds: float):
        super().__init__(decision)
        self.beat, self.seconds, self.grew = beat, seconds, None

    async def __call__(self, context, params):
        import anyio
        size = lambda: self.beat.stat().st_size if self.beat.exists() else 0  # noqa: E731
        await anyio.sleep(0.5)  # the freeze is in place well before a person reads the question
        before = size()
        await anyio.sleep(self.seconds)
        self.grew = size() - before
        return await super().__call__(context, params)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_an_approval_wait_freezes_the_whole_execution_and_only_that_time_is_given_back(
        data_dir: Path, tmp_path: Path, mode: str):
    # A thread keeps writing while the main thread waits for a person. Before, the wait extended every thread's
    # deadline (a 3 s execution ran 24.7 s, its threads working all along). Now no thread runs while the question is
    # open, and afterwards the execution has what was left of its 3 s.
    human = SlowHuman("allow_once", data_dir / "workspace" / "beat.txt", 4)
    code = """
import threading, time
def beat():
    while True:
        with open('beat.txt', 'a') as f:
            f.write('x')
        time.sleep(0.02)
threading.Thread(target=beat, daemon=True).start()
time.sleep(0.5)
call_tool("memory.create_entities", {"entities": [{"name": "ada", "entityType": "person", "observations": []}]})
time.sleep(30)
result = "ran past its deadline"
"""
    async with client(data_dir, write_config(tmp_path), human, mode) as c:
        answer = await c.call_tool("execute_code", {"code": code, "timeout_seconds": 3})
    body = answer.structured_content
    assert not body["success"] and "TimeoutError" in body["error"], body
    assert human.grew == 0, f"the heartbeat grew by {human.grew} bytes while the question was open"
    assert graph(tmp_path) == ["ada"], "the approved call went through"
    # 3 s of running, plus the time frozen (about 4.5 s): nowhere near the 30 s the code asked for.
    assert 7_000 <= body["execution_time_ms"] < 15_000, body
