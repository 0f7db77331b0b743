"""execute_code: the seed's contract, sessions, limits, and the exec command."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import anyio
import pytest
from mcp import Client

from conftest import BIN, run_cli, stdio_params

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def run(client: Client, code: str, **extra) -> dict:
    answer = await client.call_tool("execute_code", {"code": code, **extra})
    body = answer.structured_content
    assert body["success"] == (not answer.is_error), body
    assert_lean(answer.content[0].text, body)
    return body


def assert_lean(text: str, body: dict) -> None:
    """The model's text holds the answer and none of its figures."""
    for figure in ("execution_time_ms", "tool_calls", '"success"'):
        assert figure not in text, text
    if body.get("output"):
        assert text.startswith(body["output"].rstrip("\n")), text
    if not body["success"]:
        # The exception's line once, as the traceback ends with it (else the error).
        said = (body.get("traceback") or body["error"]).rstrip("\n").splitlines()[-1]
        assert said in text, text
        if ": " in said:  # a bare "MemoryError" comes after the error that explains it
            assert text.count(said) == 1, text


async def test_result_output_and_timing(data_dir: Path):
    async with Client(stdio_params(data_dir)) as client:
        body = await run(client, "print('hello')\nprint('world')\nresult = {'n': 3, 'items': [1, 2]}")
        assert body["success"] is True
        assert body["result"] == {"n": 3, "items": [1, 2]}
        assert body["output"] == "hello\nworld\n"
        assert isinstance(body["execution_time_ms"], int) and body["execution_time_ms"] >= 0
        assert "error" not in body


async def test_seed_names_are_in_scope_with_seed_semantics(data_dir: Path):
    code = """
rows = [{"team": "a", "score": 3}, {"team": "b", "score": 5}, {"team": "a", "score": 7}, {"team": "c", "score": None}]
result = {
    "filtered": filter_by_field(rows, "team", "a"),
    "summary": summarize_list(list(range(10)), 3),
    "default_sample": len(summarize_list(list(range(50)))["sample"]),
    "stats": aggregate_stats(rows, "score"),
    "auto": aggregate_stats([{"a": 1, "b": 2.5, "c": "x"}, {"a": 3, "b": 0.5, "c": "y"}]),
    "cut": format_output(list(range(1000)), 20),
    "modules": [m.__name__ for m in (json, re, math, statistics, collections)],
    "dates": [datetime(2024, 1, 2).isoformat(), str(date(2024, 1, 2) + timedelta(days=1))],
    "formatted": format_output({"a": 1}),
    "table": format_output([{"x": 1, "y": "b"}], format="table"),
    "workspace": workspace,
}
"""
    async with Client(stdio_params(data_dir)) as client:
        r = (await run(client, code))["result"]
        assert r["filtered"] == [{"team": "a", "score": 3}, {"team": "a", "score": 7}]
        assert r["summary"] == {"count": 10, "sample": [0, 1, 2]}
        assert r["default_sample"] == 10
        assert r["stats"]["count"] == 4 and r["stats"]["score_sum"] == 15 and r["stats"]["score_avg"] == 5
        assert r["auto"] == {"count": 2, "a_sum": 4, "a_avg": 2, "a_min": 1, "a_max": 3,
                             "b_sum": 3.0, "b_avg": 1.5, "b_min": 0.5, "b_max": 2.5}
        assert len(r["cut"]) == 20 and r["workspace"] == "/workspace"
        assert r["stats"]["score_min"] == 3 and r["stats"]["score_max"] == 7
        assert r["modules"] == ["json", "re", "math", "statistics", "collections"]
        assert r["dates"] == ["2024-01-02T00:00:00", "2024-01-03"]
        assert json.loads(r["formatted"]) == {"a": 1}
        assert r["table"].splitlines()[0].split("|")[0].strip() == "x"


async def test_workspace_helpers_share_files_with_the_workspace_tools(data_dir: Path):
    async with Client(stdio_params(data_dir)) as client:
        await client.call_tool("write_workspace_file", {"filename": "in/data.json", "content": "[1, 2, 3]"})
        body = await run(client, """
data = json.loads(read_file("in/data.json"))
write_file("out/sum.txt", str(sum(data)))
write_file("out/obj.json", {"k": "v"})
result = {"files": list_files(), "deleted": delete_file("in/data.json"), "after": list_files("out"),
          "written": write_file("x.txt", "abc")}
""")
        assert body["result"]["deleted"] == "Deleted in/data.json"
        assert body["result"]["written"] == "Written 3 bytes to x.txt"
        assert body["result"]["files"] == ["in/data.json", "out/obj.json", "out/sum.txt"]
        assert body["result"]["after"] == ["out/obj.json", "out/sum.txt"]
        read = await client.call_tool("read_workspace_file", {"filename": "out/sum.txt"})
        assert read.structured_content["content"] == "6"
        escape = await run(client, "read_file('../../etc/hostname')")
        assert "outside the workspace" in escape["error"]


async def test_whole_standard_library_is_importable(data_dir: Path):
    code = """
import sqlite3, csv, hashlib, zlib, decimal, fractions, itertools, functools, heapq, bisect, uuid, base64, textwrap, string, io, gzip, tarfile, zipfile, xml.etree.ElementTree as ET, html, difflib, pathlib, tempfile, multiprocessing, subprocess, ctypes, ssl, ast
db = sqlite3.connect(":memory:")
db.execute("create table t (x)")
db.executemany("insert into t values (?)", [(i,) for i in range(5)])
result = {"sum": db.execute("select sum(x) from t").fetchone()[0], "sha": hashlib.sha256(b"x").hexdigest()[:8]}
"""
    async with Client(stdio_params(data_dir)) as client:
        body = await run(client, code)
        assert body["result"] == {"sum": 10, "sha": "2d711642"}


async def test_errors_carry_the_agents_own_line_numbers(data_dir: Path):
    code = "a = 1\nb = 2\n\ndef f(x):\n    return x / 0\n\nc = f(a)\n"
    async with Client(stdio_params(data_dir)) as client:
        body = await run(client, code)
        assert body["success"] is False
        assert body["error"] == "ZeroDivisionError: division by zero"
        tb = body["traceback"]
        assert 'File "<code>", line 7, in <module>' in tb and 'File "<code>", line 5, in f' in tb
        assert "return x / 0" in tb
        assert "cem_runtime" not in tb, "runtime frames must not show"
        syntax = await run(client, "x = (1,\ny = 2")
        assert syntax["success"] is False and "SyntaxError" in syntax["error"]
        assert 'File "<code>", line 1' in syntax["traceback"]


async def test_output_printed_before_an_error_is_kept(data_dir: Path):
    async with Client(stdio_params(data_dir)) as client:
        body = await run(client, "print('step 1')\nraise ValueError('bad input')")
        assert body["output"] == "step 1\n" and body["error"] == "ValueError: bad input"


async def test_context_vars_become_variables(data_dir: Path):
    async with Client(stdio_params(data_dir)) as client:
        body = await run(client, "result = [name.upper(), limit * 2, cfg['deep'][0]]",
                         context_vars={"name": "ada", "limit": 21, "cfg": {"deep": [True]}})
        assert body["result"] == ["ADA", 42, True]


async def test_top_level_await(data_dir: Path):
    code = """
import asyncio
async def double(n):
    await asyncio.sleep(0.01)
    return n * 2
result = await asyncio.gather(*(double(i) for i in range(5)))
"""
    async with Client(stdio_params(data_dir)) as client:
        assert (await run(client, code))["result"] == [0, 2, 4, 6, 8]


async def test_non_serialisable_result_is_returned_as_repr_with_a_note(data_dir: Path):
    async with Client(stdio_params(data_dir)) as client:
        body = await run(client, "class Thing:\n    def __repr__(self):\n        return 'Thing()'\nresult = Thing()")
        assert body["success"] is True and body["result"] == "Thing()"
        assert "not JSON-serialisable" in body["note"]


async def test_output_and_result_are_capped_with_advice(data_dir: Path):
    async with Client(stdio_params(data_dir)) as client:
        body = await run(client, "print('y' * 50000)\nresult = 'z' * 50000")
        assert len(body["output"]) < 21_000 and "output truncated" in body["output"]
        assert "write_file" in body["output"]
        assert len(json.dumps(body["result"])) < 21_000 and "write_file" in body["note"]


async def test_sessions_keep_variables_and_stay_private(data_dir: Path):
    async with Client(stdio_params(data_dir)) as client:
        await run(client, "counter = 1\nimport os\npid = os.getpid()", session_id="alpha")
        body = await run(client, "counter += 1\nresult = counter", session_id="alpha")
        assert body["result"] == 2 and body["session_id"] == "alpha"
        other = await run(client, "result = 'counter' in globals()", session_id="beta")
        assert other["result"] is False, "another session must not see alpha's variables"
        stateless = await run(client, "result = 'counter' in globals()")
        assert stateless["result"] is False, "a call without session_id must not see them either"
        reset = await run(client, "result = 'counter' in globals()", session_id="alpha", reset_session=True)
        assert reset["result"] is False


async def test_stateless_calls_never_share_an_interpreter(data_dir: Path):
    async with Client(stdio_params(data_dir)) as client:
        await run(client, "leftover = 'secret'\nopen('/tmp/marker', 'w').write('x')")
        body = await run(client, "import os\nresult = ['leftover' in globals(), os.path.exists('/tmp/marker')]")
        assert body["result"] == [False, False]


async def test_a_timeout_in_a_session_ends_it_and_says_so(data_dir: Path):
    async with Client(stdio_params(data_dir)) as client:
        await run(client, "x = 41", session_id="s")
        body = await run(client, "while True: pass", session_id="s", timeout_seconds=1)
        assert "TimeoutError" in body["error"] and "variables are gone" in body["error"]
        after = await run(client, "result = 'x' in globals()", session_id="s")
        assert after["result"] is False


async def test_memory_limit_per_call(data_dir: Path):
    async with Client(stdio_params(data_dir)) as client:
        small = await run(client, "x = bytearray(200 << 20)\nresult = len(x)", memory_mb=100)
        assert small["success"] is False and "MemoryError" in small["error"]
        big = await run(client, "x = bytearray(200 << 20)\nresult = len(x)", memory_mb=600)
        assert big["result"] == 200 << 20


@pytest.mark.parametrize(
    "args, message",
    [
        ({"timeout_seconds": 0}, "timeout_seconds must be from 1"),
        ({"timeout_seconds": 100000}, "timeout_seconds must be from 1 to 300"),
        ({"memory_mb": 10}, "memory_mb must be from 32"),
        ({"memory_mb": 10**9}, "memory_mb must be from 32 to 4096"),
        ({"timeout_seconds": "ten"}, "argument 'timeout_seconds' must be a whole number"),
        ({"session_id": "../../x"}, "session_id must be"),
        ({"context_vars": [1, 2]}, "argument 'context_vars' must be an object"),
        ({"reset_session": "yes"}, "argument 'reset_session' must be true or false"),
        ({"lang": "js"}, "unknown argument 'lang'"),
    ],
)
async def test_bad_arguments_are_clear_tool_errors(data_dir: Path, args: dict, message: str):
    async with Client(stdio_params(data_dir)) as client:
        answer = await client.call_tool("execute_code", {"code": "result = 1", **args})
        assert answer.is_error and message in answer.structured_content["error"], answer.structured_content
    async with Client(stdio_params(data_dir)) as client:
        missing = await client.call_tool("execute_code", {})
        assert missing.is_error and "missing required argument 'code'" in missing.structured_content["error"]


async def test_concurrent_executions_are_independent(data_dir: Path):
    async with Client(stdio_params(data_dir)) as client:
        results = {}

        async def one(i: int) -> None:
            body = await run(client, f"import time\ntime.sleep(0.2)\nresult = {i} * 10")
            results[i] = body["result"]

        async with anyio.create_task_group() as tg:
            for i in range(6):
                tg.start_soon(one, i)
        assert results == {i: i * 10 for i in range(6)}


async def test_stats_report_the_sandbox_layers(data_dir: Path):
    async with Client(stdio_params(data_dir)) as client:
        await run(client, "result = 1")
        stats = (await client.call_tool("get_execution_stats", {})).structured_content
        sandbox = stats["sandbox"]
        assert sandbox["mode"] == "isolated" and sandbox["executions"] >= 1
        layers = {l["name"]: l for l in sandbox["layers"]}
        for name in ["namespaces", "unprivileged uid", "minimal root", "network off", "landlock", "seccomp", "no_new_privs", "cgroup"]:
            assert layers[name]["on"], layers[name]


def test_exec_command_gives_the_same_json(data_dir: Path):
    out = run_cli("--data-dir", str(data_dir), "--log-level", "warn", "exec", "print('hi')\nresult = [1, 2]")
    assert out.returncode == 0, out.stderr
    body = json.loads(out.stdout)
    assert body["success"] is True and body["result"] == [1, 2] and body["output"] == "hi\n"
    failed = run_cli("--data-dir", str(data_dir), "--log-level", "warn", "exec", "1/0")
    assert failed.returncode == 1 and json.loads(failed.stdout)["error"].startswith("ZeroDivisionError")
    piped = subprocess.run([str(BIN), "--data-dir", str(data_dir), "--log-level", "warn", "exec", "-"],
                           input="result = 'from stdin'", capture_output=True, text=True, timeout=60)
    assert json.loads(piped.stdout)["result"] == "from stdin"


def test_a_host_that_cannot_isolate_refuses_unless_allowed(data_dir: Path, tmp_path: Path):
    # A user namespace whose own limit forbids nested user namespaces is a
    # host that cannot isolate.
    wrapper = ["unshare", "--user", "--map-root-user", "sh", "-c",
               'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"', "sh"]
    refused = subprocess.run([*wrapper, str(BIN), "--data-dir", str(data_dir), "--log-level", "error", "exec", "result = 1"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2, (refused.stdout, refused.stderr)
    assert "code execution is refused" in refused.stderr and "allow_unsandboxed" in refused.stderr
    config = tmp_path / "cfg.json"
    config.write_text(json.dumps({"sandbox": {"allow_unsandboxed": True}}))
    allowed = subprocess.run([*wrapper, str(BIN), "--config", str(config), "--data-dir", str(data_dir),
                              "--log-level", "error", "exec", "result = 1"], capture_output=True, text=True, timeout=60)
    body = json.loads(allowed.stdout)
    assert body["result"] == 1 and "WITHOUT a sandbox" in body["warning"]
    doctor = subprocess.run([*wrapper, str(BIN), "--data-dir", str(data_dir), "--log-level", "error", "doctor"],
                            capture_output=True, text=True, timeout=60)
    assert doctor.returncode == 1 and "FAIL  namespaces" in doctor.stdout
    assert "execute_code will refuse to run code" in doctor.stdout
    loud = subprocess.run([*wrapper, str(BIN), "--config", str(config), "--data-dir", str(data_dir),
                           "--log-level", "error", "doctor"], capture_output=True, text=True, timeout=60)
    assert "UNSANDBOXED" in loud.stdout


def make_config(tmp_path: Path, **sandbox) -> Path:
    config = tmp_path / "cfg.json"
    config.write_text(json.dumps({"sandbox": sandbox}))
    return config


def params_with(data_dir: Path, config: Path):
    params = stdio_params(data_dir)
    params.args = ["--config", str(config), *params.args]
    return params


async def test_idle_sessions_end(data_dir: Path, tmp_path: Path):
    async with Client(params_with(data_dir, make_config(tmp_path, session_idle_seconds=1))) as client:
        await run(client, "kept = 1", session_id="idle")
        await anyio.sleep(3.5)
        stats = (await client.call_tool("get_execution_stats", {})).structured_content
        assert stats["sandbox"]["sessions"] == 0
        body = await run(client, "result = 'kept' in globals()", session_id="idle")
        assert body["result"] is False


async def test_the_pool_fills_to_its_configured_size(data_dir: Path, tmp_path: Path):
    async with Client(params_with(data_dir, make_config(tmp_path, pool_size=3))) as client:
        await run(client, "result = 1")
        for _ in range(100):
            stats = (await client.call_tool("get_execution_stats", {})).structured_content
            if stats["sandbox"]["pool_ready"] == 3:
                break
            await anyio.sleep(0.1)
        assert stats["sandbox"]["pool_ready"] == 3


async def test_a_timeout_kills_the_whole_process_tree(data_dir: Path):
    marker = "4242.5"
    async with Client(stdio_params(data_dir)) as client:
        code = f"import subprocess\nsubprocess.Popen(['sleep', '{marker}'])\nsubprocess.Popen(['sh', '-c', 'sleep {marker}'])\nwhile True: pass"
        body = await run(client, code, timeout_seconds=2)
        assert "TimeoutError" in body["error"]
        await anyio.sleep(0.5)
        left = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True)
        assert left.stdout.strip() == "", f"processes survived the timeout: {left.stdout}"


async def test_a_virtualenv_interpreter_brings_its_packages(data_dir: Path, tmp_path: Path):
    venv = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "cem_venv_probe.py").write_text("ANSWER = 'from the venv'\n")
    config = make_config(tmp_path, python=str(venv / "bin" / "python"))
    async with Client(params_with(data_dir, config)) as client:
        body = await run(client, "import sys, cem_venv_probe\nresult = [cem_venv_probe.ANSWER, sys.prefix]")
        assert body["result"] == ["from the venv", str(venv)]


async def test_an_interpreter_outside_the_debian_layout(data_dir: Path, tmp_path: Path):
    candidates = sorted(Path("/root/.pyenv/versions").glob("3.*/bin/python3")) if os.access("/root", os.X_OK) else []
    if not candidates:
        pytest.skip("no interpreter outside /usr on this machine")
    config = make_config(tmp_path, python=str(candidates[0]))
    async with Client(params_with(data_dir, config)) as client:
        body = await run(client, "import sys, sqlite3, ssl\nresult = sys.prefix")
        assert body["result"].startswith("/root/.pyenv/versions/")
