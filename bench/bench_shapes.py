"""The share of upstream tools whose return type is known, before and after shapes are learned.

Five real servers, as the integration tests install them (tests/js/node_modules for server-everything,
server-filesystem and server-memory; the .test-env/servers virtualenv for mcp-server-git and
mcp-server-time), each tool counted once:

1. declared: the tools whose definition has a return type before anything ran (their `outputSchema`);
2. probed: after `tools discover` (with `--arg repo_path=<a scratch repository>`);
3. learned: after code called every tool without a declared schema once (arguments below, in a scratch
   repository and directory; everything's simulate-research-query runs only as an MCP task, which code
   does not start, so it is left uncalled);
4. accuracy: each learned tool called again with other arguments; the share of those results that fit
   the shape as it was (a result that does not fit widens the shape, and `tools shapes` counts it);
5. the agent's side: a scripted agent asked for the unpaid invoices of a customer, on the integration
   tests' records server (JSON with no outputSchema). Without a shape it reads the definition (`-> Any`),
   runs code to print a sample, then runs the filter; with one it reads the definition (TypedDicts) and
   runs the filter. Executions and o200k tokens of every request and answer, as the token benchmark
   counts them (`code-execution-mcp tokens`).

    /usr/bin/python3 bench/bench_shapes.py target/debug/code-execution-mcp

Standard library only. Prints a JSON report.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from tokens.wire import StdioClient, TokenCounter  # noqa: E402

MCP = REPO / "tests" / "js" / "node_modules" / "@modelcontextprotocol"
SERVERS_PYTHON = REPO / ".test-env" / "servers" / "bin" / "python"
SDK1_PYTHON = REPO / ".test-env" / "sdk1" / "bin" / "python"
RECORDS = REPO / "tests" / "integration" / "servers" / "records_server.py"
SAMPLE = "from servers.records import invoices\nimport json\nprint(json.dumps(invoices(customer=1))[:1500])"
FILTER = ("from servers.records import invoices\nr = invoices(customer=1)\n"
          "result = [{'id': i['invoice_id'], 'due': i['amount_due']} for i in r['invoices'] if not i['paid']]")


def agent(binary: str, data: Path, config: Path, counter: TokenCounter, sample_first: bool) -> dict:
    """The scripted agent's turns: executions and tokens of every request and answer."""
    client = StdioClient("cem", [binary, "--data-dir", str(data), "--config", str(config), "--log-level", "error",
                                 "serve"])
    try:
        turns = [client.call("get_tool_definition", {"tool_name": "records.invoices"})]
        if sample_first:
            turns.append(client.call("execute_code", {"code": SAMPLE}))
        turns.append(client.call("execute_code", {"code": FILTER}))
        answer = json.loads(turns[-1].result["content"][0]["text"])
        assert answer["success"] and answer["result"], answer
        tokens = sum(counter.count(t.params_json) + counter.count(t.result_json()) for t in turns)
        return {"executions": len(turns) - 1, "tokens": tokens,
                "signature": json.loads(turns[0].result["content"][0]["text"])["python"]["signature"]}
    finally:
        client.close()


def servers(root: Path) -> dict:
    return {
        "everything": {"command": "node", "args": [str(MCP / "server-everything" / "dist" / "index.js"), "stdio"]},
        "git": {"command": str(SERVERS_PYTHON), "args": ["-m", "mcp_server_git"]},
        "time": {"command": str(SERVERS_PYTHON), "args": ["-m", "mcp_server_time"]},
        "filesystem": {"command": "node", "args": [str(MCP / "server-filesystem" / "dist" / "index.js"), str(root)]},
        "memory": {"command": "node", "args": [str(MCP / "server-memory" / "dist" / "index.js")],
                   "env": {"MEMORY_FILE_PATH": str(root / "memory.json")}},
    }


def first_calls(repo: str) -> dict:
    """One call of each tool that declares no outputSchema, as code would make it, and a second with other
    arguments (None: the tool is not called a second time)."""
    r = repo
    return {
        "everything.echo": ({"message": "hello"}, {"message": "a longer message with words"}),
        "everything.get-annotated-message": ({"messageType": "error"}, {"messageType": "success", "includeImage": True}),
        "everything.get-env": ({}, {}),
        "everything.get-resource-links": ({}, {"count": 5}),
        "everything.get-resource-reference": ({}, {"resourceType": "Text", "resourceId": 3}),
        "everything.get-sum": ({"a": 1, "b": 2}, {"a": 2.5, "b": -7}),
        "everything.get-tiny-image": ({}, {}),
        "everything.toggle-simulated-logging": ({}, {}),
        "everything.toggle-subscriber-updates": ({}, {}),
        "everything.trigger-long-running-operation": ({"duration": 1, "steps": 2}, {"duration": 1, "steps": 3}),
        "everything.gzip-file-as-resource": ({"name": "a.gz", "data": "data:text/plain;base64,aGVsbG8="},
                                             {"name": "b.gz", "data": "data:text/plain;base64,d29ybGQ=",
                                              "outputType": "resource"}),
        "git.git_status": ({"repo_path": r}, {"repo_path": r}),
        "git.git_diff_unstaged": ({"repo_path": r}, {"repo_path": r, "context_lines": 1}),
        "git.git_diff_staged": ({"repo_path": r}, {"repo_path": r, "context_lines": 1}),
        "git.git_diff": ({"repo_path": r, "target": "HEAD"}, {"repo_path": r, "target": "HEAD~1"}),
        "git.git_add": ({"repo_path": r, "files": ["b.txt"]}, {"repo_path": r, "files": ["c.txt"]}),
        "git.git_commit": ({"repo_path": r, "message": "second"}, {"repo_path": r, "message": "third"}),
        "git.git_reset": ({"repo_path": r}, {"repo_path": r}),
        "git.git_log": ({"repo_path": r}, {"repo_path": r, "max_count": 1}),
        "git.git_create_branch": ({"repo_path": r, "branch_name": "feature"}, {"repo_path": r, "branch_name": "other"}),
        "git.git_checkout": ({"repo_path": r, "branch_name": "feature"}, {"repo_path": r, "branch_name": "master"}),
        "git.git_show": ({"repo_path": r, "revision": "HEAD"}, {"repo_path": r, "revision": "HEAD~1"}),
        "git.git_branch": ({"repo_path": r, "branch_type": "local"}, {"repo_path": r, "branch_type": "all"}),
    }


def cli(binary: str, data: Path, config: Path, *args: str) -> str:
    out = subprocess.run([binary, "--data-dir", str(data), "--config", str(config), "--log-level", "error", *args],
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"{args}: {out.stderr[-2000:]}")
    return out.stdout


def known(binary: str, data: Path, config: Path, tools: list[str]) -> dict:
    """Each tool's `returns` source (None: no return type)."""
    client = StdioClient("cem", [binary, "--data-dir", str(data), "--config", str(config), "--log-level", "error",
                                 "serve"])
    try:
        sources = {}
        for tool in tools:
            d = json.loads(client.call("get_tool_definition", {"tool_name": tool}).result["content"][0]["text"])
            sources[tool] = (d.get("returns") or {}).get("source")
        return sources
    finally:
        client.close()


def execute(binary: str, data: Path, config: Path, calls: dict) -> None:
    code = "import json, sys\ncalls = json.loads(sys.argv[1] if len(sys.argv) > 1 else CALLS)\nfailed = []\n" \
           "for tool, args in calls.items():\n    try:\n        call_tool(tool, args)\n" \
           "    except ToolError as e:\n        failed.append([tool, e.message[:200]])\nresult = failed\n"
    code = code.replace("CALLS", repr(json.dumps(calls)))
    out = json.loads(cli(binary, data, config, "exec", code))
    if out["result"]:
        print(json.dumps({"failed_calls": out["result"]}), file=sys.stderr)


def main() -> None:
    binary = sys.argv[1] if len(sys.argv) > 1 else str(REPO / "target" / "debug" / "code-execution-mcp")
    # A workspace the server mounted may still be busy for a moment when the run ends.
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        tmp = Path(tmp)
        root, data, repo = tmp / "root", tmp / "data", tmp / "repo"
        root.mkdir()
        data.mkdir()
        subprocess.run(["git", "init", "-q", "-b", "master", str(repo)], check=True)
        for name in ["a.txt", "b.txt", "c.txt"]:
            (repo / name).write_text(name)
        git = ["git", "-C", str(repo), "-c", "user.email=bench@example.invalid", "-c", "user.name=bench"]
        subprocess.run([*git, "add", "a.txt"], check=True)
        subprocess.run([*git, "commit", "-q", "-m", "first"], check=True)
        (repo / "a.txt").write_text("changed")
        config = tmp / "config.json"
        # git_reset is destructive by its annotation: allowed here, as code has no one to ask.
        config.write_text(json.dumps({"mcpServers": servers(root), "policy": {"rules": {"git.git_reset": "allow"}}}))
        listed = cli(binary, data, config, "tools", "list")
        tools = sorted(line.split()[0] for line in listed.splitlines()
                       if line.split() and "." in line.split()[0] and line.split()[0].split(".")[0] in servers(root))
        declared = known(binary, data, config, tools)
        cli(binary, data, config, "tools", "discover", "--arg", f"repo_path={repo}")
        probed = known(binary, data, config, tools)
        calls = first_calls(str(repo))
        execute(binary, data, config, {t: a for t, (a, _) in calls.items()})
        learned = known(binary, data, config, tools)
        before = {json.loads(line)["tool"]: json.loads(line) for line in
                  cli(binary, data, config, "tools", "shapes", "--json").splitlines()}
        execute(binary, data, config, {t: b for t, (_, b) in calls.items() if b is not None})
        after = {json.loads(line)["tool"]: json.loads(line) for line in
                 cli(binary, data, config, "tools", "shapes", "--json").splitlines()}
        again = [t for t in after if t in before and after[t]["calls"] > before[t]["calls"]]
        widened = [t for t in again if after[t]["widened"] > before[t]["widened"]]
        # The agent's side, on a fresh data directory: once without a shape, then once the shape was learned.
        agent_data = tmp / "agent"
        agent_data.mkdir()
        agent_config = tmp / "agent.json"
        agent_config.write_text(json.dumps({"mcpServers": {"records": {"command": str(SDK1_PYTHON),
                                                                       "args": [str(RECORDS)]}}}))
        counter = TokenCounter(binary)
        try:
            without = agent(binary, agent_data, agent_config, counter, sample_first=True)
            with_shape = agent(binary, agent_data, agent_config, counter, sample_first=False)
        finally:
            counter.close()
        share = lambda sources: round(sum(1 for s in sources.values() if s) / len(tools), 3)  # noqa: E731
        report = {
            "tools": len(tools),
            "declared": share(declared),
            "after_discover": share(probed),
            "after_one_call_each": share(learned),
            "without_type_after_all": sorted(t for t, s in learned.items() if not s),
            "second_calls": len(again),
            "second_calls_fit": round(1 - len(widened) / max(len(again), 1), 3),
            "widened": widened,
            "agent_without_shape": without,
            "agent_with_shape": with_shape,
        }
        print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
