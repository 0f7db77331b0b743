"""Tools from inside the sandbox: code calls real upstream servers through the bridge."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client

from conftest import BIN, SDK1_PYTHON, SERVERS_PYTHON, stdio_params
from test_upstream import EVERYTHING, FILESYSTEM, MEMORY

pytestmark = pytest.mark.anyio

CANARY = "cem-upstream-secret-41c7"
FAULT = str(Path(__file__).parent / "servers" / "fault_server.py")


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with a known history."""
    path = tmp_path / "repo"
    path.mkdir()
    env = {"GIT_AUTHOR_NAME": "Ada", "GIT_AUTHOR_EMAIL": "ada@example.com",
           "GIT_COMMITTER_NAME": "Ada", "GIT_COMMITTER_EMAIL": "ada@example.com", "PATH": "/usr/bin:/bin"}
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True, env=env)
    for i in range(5):
        (path / f"f{i}.txt").write_text(str(i))
        subprocess.run(["git", "-C", str(path), "add", "."], check=True, env=env)
        subprocess.run(["git", "-C", str(path), "commit", "-q", "-m", f"commit number {i}"], check=True, env=env)
    return path


def servers(tmp_path: Path) -> dict:
    root = tmp_path / "fsroot"
    root.mkdir(exist_ok=True)
    return {
        "everything": {"command": "node", "args": [EVERYTHING, "stdio"], "env": {"CEM_SECRET": CANARY}},
        "git": {"command": str(SERVERS_PYTHON), "args": ["-m", "mcp_server_git"]},
        "filesystem": {"command": "node", "args": [FILESYSTEM, str(root)]},
        "memory": {"command": "node", "args": [MEMORY], "env": {"MEMORY_FILE_PATH": str(root / "memory.json")}},
        "fault": {"command": str(SDK1_PYTHON), "args": [FAULT]},
    }


def client_for(data_dir: Path, tmp_path: Path, **extra) -> Client:
    config = tmp_path / "mcp_config.json"
    config.write_text(json.dumps({"mcpServers": servers(tmp_path), **extra}))
    params = stdio_params(data_dir)
    params.args = ["--config", str(config), *params.args]
    return Client(params)


async def run(client: Client, code: str, **extra) -> dict:
    answer = await client.call_tool("execute_code", {"code": code, "timeout_seconds": 60, **extra})
    return answer.structured_content


async def test_calls_to_server_everything(data_dir: Path, tmp_path: Path):
    code = """
echo = call_tool("everything.echo", {"message": "hello"})
total = call_tool("everything__get-sum", {"a": 2, "b": 40})
by_attribute = tools.everything.get_sum(a=1, b=1)
structured = call_tool("everything.get-structured-content", {"location": "New York"})
image = call_tool("everything.get-tiny-image", {})
result = {"echo": echo, "sum": total, "attr": by_attribute, "structured": structured,
          "image_types": [b.get("type") for b in image] if isinstance(image, list) else type(image).__name__}
"""
    async with client_for(data_dir, tmp_path) as client:
        body = await run(client, code)
        assert body["success"], body
        r = body["result"]
        assert r["echo"] == "Echo: hello"
        assert "42" in r["sum"] and "2" in r["attr"]
        assert isinstance(r["structured"], dict) and "temperature" in r["structured"], r["structured"]
        assert "image" in r["image_types"]
        assert body["tool_calls"] == 5
        assert body["tokens"]["tool_results"] > 0 and body["tokens"]["returned"] > 0


async def test_generated_wrappers_are_importable_from_servers(data_dir: Path, tmp_path: Path):
    async with client_for(data_dir, tmp_path) as client:
        await client.call_tool("search_tools", {"query": "echo"})  # builds the catalog and the wrappers
        body = await run(client, """
import os
from servers.everything import get_sum
from servers.git import git_status
result = {"sum": get_sum(a=20, b=22), "listing": sorted(os.listdir("/servers/everything"))[:3],
          "doc": get_sum.__doc__.splitlines()[0]}
try:
    open("/servers/everything/evil.py", "w")
    result["writable"] = True
except OSError:
    result["writable"] = False
""")
        assert body["success"], body
        assert "42" in body["result"]["sum"]
        assert body["result"]["doc"] == "Returns the sum of two numbers"
        assert body["result"]["writable"] is False


async def test_git_log_of_a_generated_repository(data_dir: Path, tmp_path: Path, repo: Path):
    code = f"""
log = call_tool("git.git_log", {{"repo_path": {str(repo)!r}, "max_count": 10}})
text = log if isinstance(log, str) else json.dumps(log)
result = {{"commits": text.count("commit number"), "has_author": "Ada" in text}}
"""
    async with client_for(data_dir, tmp_path) as client:
        body = await run(client, code)
        assert body["success"], body
        assert body["result"] == {"commits": 5, "has_author": True}


async def test_a_filesystem_and_memory_pipeline(data_dir: Path, tmp_path: Path):
    root = tmp_path / "fsroot"
    root.mkdir(exist_ok=True)
    (root / "people.csv").write_text("name,team\nAda,core\nGrace,compilers\nLinus,kernel\n")
    code = f"""
import csv, io
text = call_tool("filesystem.read_text_file", {{"path": {str(root / 'people.csv')!r}}})
rows = list(csv.DictReader(io.StringIO(text if isinstance(text, str) else text["content"])))
call_tool("memory.create_entities", {{"entities": [
    {{"name": r["name"], "entityType": "person", "observations": ["team " + r["team"]]}} for r in rows]}})
found = call_tool("memory.search_nodes", {{"query": "compilers"}})
result = {{"rows": len(rows), "found": [e["name"] for e in found["entities"]]}}
"""
    async with client_for(data_dir, tmp_path) as client:
        body = await run(client, code)
        assert body["success"], body
        assert body["result"] == {"rows": 3, "found": ["Grace"]}


async def test_one_hundred_concurrent_calls(data_dir: Path, tmp_path: Path):
    code = """
import asyncio, time
t0 = time.perf_counter()
answers = await asyncio.gather(*(call_tool_async("fault.sleep", {"seconds": 0.5}) for _ in range(100)))
result = {"n": len(answers), "seconds": time.perf_counter() - t0}
"""
    async with client_for(data_dir, tmp_path) as client:
        body = await run(client, code)
        assert body["success"], body
        assert body["result"]["n"] == 100 and body["tool_calls"] == 100
        # 100 half-second calls one after another would take 50 s.
        assert body["result"]["seconds"] < 25, body["result"]


async def test_an_upstream_that_crashes_or_hangs_raises_and_the_server_keeps_serving(data_dir: Path, tmp_path: Path):
    code = """
errors = {}
for tool, args in [("fault.crash", {}), ("fault.sleep", {"seconds": 30})]:
    try:
        call_tool(tool, args)
        errors[tool] = None
    except ToolError as e:
        errors[tool] = {"server": e.server, "tool": e.tool, "message": e.message}
after = call_tool("fault.ok", {})
result = {"errors": errors, "after": after}
"""
    async with client_for(data_dir, tmp_path, upstream={"timeout_seconds": 2}) as client:
        body = await run(client, code)
        assert body["success"], body
        crash, hang = body["result"]["errors"]["fault.crash"], body["result"]["errors"]["fault.sleep"]
        assert crash["server"] == "fault" and "restarted on next use" in crash["message"], crash
        assert hang["server"] == "fault" and "within 2 s" in hang["message"], hang
        # FastMCP answers with structured content {"result": ...}, which the bridge prefers.
        assert body["result"]["after"]["result"].startswith("ok from")
        again = await run(client, "result = call_tool('everything.echo', {'message': 'still here'})")
        assert again["result"] == "Echo: still here"


async def test_tool_errors_and_bad_names(data_dir: Path, tmp_path: Path):
    code = """
out = []
for name in ["everything.no_such_tool", "nosuchserver.tool", "no-dot"]:
    try:
        call_tool(name, {})
    except ToolError as e:
        out.append(str(e))
result = out
"""
    async with client_for(data_dir, tmp_path) as client:
        body = await run(client, code)
        assert body["success"], body
        notfound, unknown, badname = body["result"]
        assert notfound.startswith("everything.no_such_tool: everything has no tool named 'no_such_tool'"), notfound
        assert "approval" not in notfound, notfound
        assert "no upstream server named 'nosuchserver'" in unknown
        assert "not a tool name" in badname


async def test_upstream_secrets_never_reach_the_sandbox(data_dir: Path, tmp_path: Path):
    code = f"""
import os
def scan(path):
    try:
        with open(path, "rb") as f:
            return {CANARY!r}.encode() in f.read(1 << 20)
    except OSError:
        return False
hits = [p for p in (f"/proc/{{d}}/environ" for d in os.listdir("/proc") if d.isdigit()) if scan(p)]
for root, dirs, files in os.walk("/"):
    if root.startswith(("/proc", "/sys", "/dev", "/usr", "/lib")):
        dirs[:] = []
        continue
    hits += [os.path.join(root, f) for f in files if scan(os.path.join(root, f))]
echo = call_tool("everything.echo", {{"message": "x"}})
result = {{"hits": hits, "env": {CANARY!r} in str(os.environ)}}
"""
    async with client_for(data_dir, tmp_path) as client:
        body = await run(client, code)
        assert body["success"], body
        assert body["result"] == {"hits": [], "env": False}


async def test_search_tools_from_code_matches_the_mcp_tool(data_dir: Path, tmp_path: Path):
    async with client_for(data_dir, tmp_path) as client:
        from_mcp = (await client.call_tool("search_tools", {"query": "knowledge graph", "limit": 3})).structured_content
        body = await run(client, "result = search_tools('knowledge graph', limit=3)")
        assert body["result"]["tools"] == from_mcp["tools"]


async def test_a_call_from_code_starts_only_the_server_it_calls(data_dir: Path, tmp_path: Path):
    from test_upstream import processes_with

    marker = f"bridge-lazy-{os.getpid()}"
    config = servers(tmp_path)
    (tmp_path / marker).mkdir()
    config["filesystem"]["args"].append(str(tmp_path / marker))
    path = tmp_path / "lazy.json"
    path.write_text(json.dumps({"mcpServers": config}))
    params = stdio_params(data_dir)
    params.args = ["--config", str(path), *params.args]
    async with Client(params) as client:
        body = await run(client, "result = tools.everything.get_sum(a=1, b=2)")
        assert body["success"] and "3" in body["result"], body
        assert processes_with(marker) == [], "calling everything started the filesystem server too"


async def test_large_binary_content_goes_to_the_workspace_and_small_stays_inline(data_dir: Path, tmp_path: Path):
    code = """
big = call_tool("fault.big_image", {"kib": 256})
small = call_tool("fault.big_image", {"kib": 1})
result = {"big": big, "small_has_data": "data" in small[0], "small_type": small[0]["type"]}
"""
    async with client_for(data_dir, tmp_path) as client:
        body = await run(client, code)
        assert body["success"], body
        block = body["result"]["big"][0]
        assert block["type"] == "image" and "data" not in block, block
        assert block["path"].startswith("tool-output/") and block["path"].endswith(".png")
        assert (data_dir / "workspace" / block["path"]).stat().st_size == 256 * 1024 == block["size"]
        assert body["result"]["small_has_data"] and body["result"]["small_type"] == "image"
        # The bytes stayed out of the answer.
        assert len(json.dumps(body)) < 5000


async def test_a_call_polls_for_a_fast_answer_and_not_for_slow_tools(data_dir: Path, tmp_path: Path):
    """A synchronous call polls up to 1 ms for its answer before it sleeps (waking a sleeping
    process is most of what a call from code adds); after three answers that came later (a slow
    tool), it polls only every 16th wait, so slow tools cost no CPU. No timing is asserted: the
    reader is driven with answers that are there at once or come 200 ms late."""
    code = """
import os, threading, time
import __main__ as runtime
# call_tool polls: a tool answering in 20 ms outlasts every poll.
for _ in range(6):
    call_tool("fault.sleep", {"seconds": 0.02})
slow_misses = runtime._LINES.misses
# The reader itself, on a pipe of its own.
r, w = os.pipe()
lines = runtime._Lines(r)
os.write(w, b"at once\\n")
first = lines.next(None, spin=True)
def late():
    time.sleep(0.2)
    os.write(w, b"late\\n")
later = []
for _ in range(4):
    threading.Thread(target=late).start()
    later.append(lines.next(5, spin=True))
result = {"spin": runtime._SPIN_SECONDS, "cpus": len(os.sched_getaffinity(0)), "slow_misses": slow_misses,
          "first": first.decode(), "later": [l.decode() for l in later],
          "caught": lines.caught, "misses": lines.misses, "waits": lines.waits}
"""
    async with client_for(data_dir, tmp_path) as client:
        body = await run(client, code)
        assert body["success"], body
        r = body["result"]
        if r["cpus"] < 2:
            pytest.skip("one CPU: the runtime never polls (test_no_polling_on_one_cpu)")
        assert r["spin"] == 0.001 and r["slow_misses"] >= 3, r
        assert r["first"] == "at once\n" and r["later"] == ["late\n"] * 4, r
        # Caught the first answer polling; missed three late ones; skipped polling on the fourth.
        assert (r["caught"], r["misses"], r["waits"]) == (1, 3, 5), r


def test_no_polling_on_one_cpu(data_dir: Path):
    """With one CPU a poll would take the CPU the host and the upstream need: the runtime sleeps."""
    taskset = shutil.which("taskset")
    if taskset is None:
        pytest.skip("taskset is not installed")
    code = "import os, __main__\nresult = [__main__._SPIN_SECONDS, len(os.sched_getaffinity(0))]"
    out = subprocess.run([taskset, "-c", "0", str(BIN), "--data-dir", str(data_dir), "--log-level", "error",
                          "exec", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["result"] == [0.0, 1]


async def test_the_call_limit_per_execution(data_dir: Path, tmp_path: Path):
    code = """
done = 0
try:
    for _ in range(10):
        call_tool("everything.echo", {"message": "x"})
        done += 1
except ToolError as e:
    error = str(e)
result = {"done": done, "error": error}
"""
    async with client_for(data_dir, tmp_path, sandbox={"max_tool_calls": 5}) as client:
        body = await run(client, code)
        assert body["result"]["done"] == 5, body
        assert "more than 5 tool calls" in body["result"]["error"]
        again = await run(client, "result = call_tool('everything.echo', {'message': 'fresh'})")
        assert again["result"] == "Echo: fresh", "the limit is per execution"


async def test_a_result_over_the_size_limit_raises_and_the_next_call_works(data_dir: Path, tmp_path: Path):
    code = """
try:
    call_tool("fault.big_text", {"mib": 17})
    error = None
except ToolError as e:
    error = {"server": e.server, "tool": e.tool, "message": e.message}
result = {"error": error, "after": call_tool("fault.ok", {})}
"""
    async with client_for(data_dir, tmp_path) as client:
        body = await run(client, code)
        assert body["success"], body
        error = body["result"]["error"]
        assert error and error["server"] == "fault" and error["tool"] == "big_text", body
        assert "over the 16777216-byte limit" in error["message"] and "ask the tool for less" in error["message"]
        assert "ok from" in json.dumps(body["result"]["after"])


async def test_calls_from_threads_a_timeout_in_code_and_a_late_answer(data_dir: Path, tmp_path: Path):
    # Each thread reads its own answer, or is handed it by the thread that
    # read it; an answer that arrives after its caller gave up is discarded.
    code = """
import threading
try:
    call_tool("fault.sleep", {"seconds": 1.5}, timeout=0.3)
    late = None
except ToolError as e:
    late = str(e)
answers = {}
def work(i):
    answers[i] = call_tool("everything.echo", {"message": str(i)})
threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
for t in threads: t.start()
for t in threads: t.join()
import time
time.sleep(1.5)  # the late answer arrives now, with nobody waiting for it
result = {"late": late, "answers": [answers[i] for i in range(8)], "after": call_tool("everything.echo", {"message": "after"})}
"""
    async with client_for(data_dir, tmp_path) as client:
        body = await run(client, code)
        assert body["success"], body
        assert "no answer within 0.3 s" in body["result"]["late"], body
        assert body["result"]["answers"] == [f"Echo: {i}" for i in range(8)], body
        assert body["result"]["after"] == "Echo: after"


async def test_an_answer_too_big_for_the_transport_fails_the_call_at_once(data_dir: Path, tmp_path: Path):
    # Over 64 MiB the transport itself refuses the line; the waiting call
    # gets an error right away (not its 60 s timeout) and the server stays up.
    code = """
import time
t0 = time.monotonic()
try:
    call_tool("fault.big_text", {"mib": 65})
    error = None
except ToolError as e:
    error = e.message
result = {"error": error, "seconds": time.monotonic() - t0, "after": call_tool("fault.ok", {})}
"""
    async with client_for(data_dir, tmp_path) as client:
        body = await run(client, code)
        assert body["success"], body
        assert "over 64 MiB" in body["result"]["error"] and "ask the tool for less" in body["result"]["error"], body
        assert body["result"]["seconds"] < 50, "the call waited for its timeout"
        assert "ok from" in json.dumps(body["result"]["after"])


async def test_tool_names_with_double_underscores_and_dots_are_called_by_wrapper_and_name(data_dir: Path, tmp_path: Path):
    # `server__tool` is an accepted spelling of `server.tool`; a tool whose own name has `__`
    # must still be found (the dot, which a server's name never has, splits first).
    config = tmp_path / "mcp_config.json"
    config.write_text(json.dumps({"mcpServers": {
        "fault": {"command": str(SDK1_PYTHON), "args": [FAULT], "env": {"FAULT_EXTRA_TOOLS": "list__items,read.me"}}}}))
    params = stdio_params(data_dir)
    params.args = ["--config", str(config), *params.args]
    code = """
from servers.fault import list__items, read_me
result = [call_tool("fault.list__items", {}), list__items(), call_tool("fault.read.me", {}), read_me(),
          call_tool("fault__ok", {}), call_tool("fault__read.me", {})]
"""
    async with Client(params) as client:
        body = await run(client, code)
        definition = await client.call_tool("get_tool_definition", {"tool_name": "fault.list__items"})
    assert body["success"] and body["result"][:4] == ["list__items", "list__items", "read.me", "read.me"], body
    assert "ok from" in str(body["result"][4]) and body["result"][5] == "read.me", body
    assert not definition.is_error, definition

