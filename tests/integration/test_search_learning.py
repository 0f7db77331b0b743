"""Search that learns from use, with five real upstream servers: a tool the session used after a search ranks
higher when the search comes again; the records keep no personal data, survive a restart, can be listed,
explained and cleared from the CLI, and `search.learn: false` records nothing."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from mcp import Client

from conftest import run_cli
from test_upstream import call, five_servers, params_for

pytestmark = pytest.mark.anyio

# A need in other words, where git_log is not first before any use (asserted below).
NEED = "who changed what lately"


@pytest.fixture
def anyio_backend():
    return "asyncio"


def git_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    for args in (["init", "-q"], ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "one"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    return repo


async def names(client: Client, query: str) -> list[str]:
    found = await call(client, "search_tools", {"query": query, "detail_level": "name", "limit": 10})
    assert not found["is_error"], found
    return found["tools"]


async def test_a_tool_used_after_a_search_ranks_first_when_it_comes_again(data_dir: Path, tmp_path: Path):
    repo = git_repo(tmp_path)
    servers = five_servers(tmp_path)
    async with Client(params_for(data_dir, tmp_path, servers)) as client:
        before = await names(client, NEED)
        assert before[0] != "git.git_log" and "git.git_log" in before, before
        # Code calls the tool it wanted, in a loop: one use.
        ran = await call(client, "execute_code", {"code": (
            f"for _ in range(3):\n    log = call_tool('git.git_log', {{'repo_path': {str(repo)!r}, 'max_count': 1}})\n"
            "result = 'one' in str(log)")})
        assert ran["success"] and ran["result"] is True, ran
        after = await names(client, NEED)
        assert after[0] == "git.git_log", after
        # Reading a definition after a search is a use too; the query's personal data is not kept.
        await names(client, "folder listing for bob@corp.example please")
        definition = await call(client, "get_tool_definition", {"tool_name": "filesystem.list_directory"})
        assert not definition["is_error"], definition

    config = tmp_path / "mcp_config.json"
    base = ["--config", str(config), "--data-dir", str(data_dir)]
    listed = run_cli(*base, "tools", "learned", "--json")
    assert listed.returncode == 0, listed.stderr
    records = [json.loads(line) for line in listed.stdout.splitlines()]
    by_tool = {r["tool"]: r for r in records}
    assert by_tool["git.git_log"]["query"] == "who changed what lately", records
    assert round(by_tool["git.git_log"]["weight"], 2) == 1.0, records
    assert "filesystem.list_directory" in by_tool, records
    saved = (data_dir / "search" / "learned.json").read_text()
    assert "bob" not in saved and "corp.example" not in saved, saved

    # After a restart the records still count, and --explain says so.
    explained = run_cli(*base, "tools", "search", NEED, "--limit", "3", "--explain", timeout=60)
    assert explained.returncode == 0, explained.stderr
    first = explained.stdout.splitlines()[1]
    assert "git.git_log" in first and 'learned +' in first and "who changed what lately" in first, explained.stdout

    cleared = run_cli(*base, "tools", "learned", "--clear", "--tool", "git.git_log")
    assert "forgot 1 record(s)" in cleared.stdout, cleared.stdout
    left = run_cli(*base, "tools", "learned", "--json").stdout
    assert "git.git_log" not in left and "filesystem.list_directory" in left, left
    again = run_cli(*base, "tools", "search", NEED, "--limit", "3", "--explain", timeout=60).stdout
    assert "learned" not in again, again


async def test_search_learn_off_records_nothing(data_dir: Path, tmp_path: Path):
    repo = git_repo(tmp_path)
    params = params_for(data_dir, tmp_path, five_servers(tmp_path), search={"learn": False})
    async with Client(params) as client:
        before = await names(client, NEED)
        ran = await call(client, "execute_code", {"code": (
            f"call_tool('git.git_log', {{'repo_path': {str(repo)!r}, 'max_count': 1}})\nresult = 1")})
        assert ran["success"], ran
        assert await names(client, NEED) == before
    assert not (data_dir / "search" / "learned.json").exists()


def transformer() -> dict:
    """The `search` section naming the transformer `scripts/test` builds (crates/embed/model/build_onnx.sh)."""
    model, runtime = os.environ.get("CEM_ONNX_MODEL_DIR"), os.environ.get("CEM_ONNX_RUNTIME")
    if not (model and runtime):
        pytest.fail("CEM_ONNX_MODEL_DIR and CEM_ONNX_RUNTIME name the transformer scripts/test builds; run "
                    "`code-execution-mcp tools transformer DIR` and set them to DIR/minilm and DIR/runtime/libonnxruntime.so")
    return {"model": model, "onnx_runtime": runtime}


# Needs in other words that the built-in static model leaves out of the first three (asserted below).
PARAPHRASES = {
    "Which top-level locations on this computer are open to me for reading and writing?":
        "filesystem.list_allowed_directories",
    "Give me the complete stored contents: every record and every link between them.": "memory.read_graph",
}


async def test_the_transformer_finds_needs_in_other_words_and_learns(data_dir: Path, tmp_path: Path):
    repo = git_repo(tmp_path)
    servers = five_servers(tmp_path)
    async with Client(params_for(data_dir / "static", tmp_path, servers)) as client:
        for query, tool in PARAPHRASES.items():
            assert tool not in (await names(client, query))[:3], query
    async with Client(params_for(data_dir, tmp_path, servers, search=transformer())) as client:
        for query, tool in PARAPHRASES.items():
            assert (await names(client, query))[0] == tool, query
        # Learning works with it as with the static model: one use after a search, and the same need in
        # other words finds the tool first.
        assert (await names(client, "what got committed to the repo recently, and by whom?"))[0] != "git.git_log"
        ran = await call(client, "execute_code", {"code": (
            f"log = call_tool('git.git_log', {{'repo_path': {str(repo)!r}, 'max_count': 1}})\nresult = 'one' in str(log)")})
        assert ran["success"] and ran["result"] is True, ran
        assert (await names(client, "who committed what to the repository lately?"))[0] == "git.git_log"
    config = tmp_path / "mcp_config.json"
    doctor = run_cli("--config", str(config), "--data-dir", str(data_dir), "doctor", "--json", timeout=120)
    search = next(c for c in json.loads(doctor.stdout)["checks"] if c["check"] == "search")
    assert search["status"] == "ok" and "model onnx-384-" in search["detail"], search
    assert "tools transformer" not in search["detail"], search


async def test_a_transformer_that_does_not_load_is_said_and_search_still_ranks(data_dir: Path, tmp_path: Path):
    missing = tmp_path / "no-such-model"
    search = {"model": str(missing), "onnx_runtime": transformer()["onnx_runtime"]}
    async with Client(params_for(data_dir, tmp_path, five_servers(tmp_path), search=search)) as client:
        found = await names(client, "commit logs")
        assert found[0] == "git.git_log", found
    config = tmp_path / "mcp_config.json"
    doctor = run_cli("--config", str(config), "--data-dir", str(data_dir), "doctor", "--json", timeout=120)
    check = next(c for c in json.loads(doctor.stdout)["checks"] if c["check"] == "search")
    assert check["status"] == "warn", check
    assert "NOT the transformer" in check["detail"] and str(missing) in check["detail"], check
    assert "tools transformer" in check["detail"], check
