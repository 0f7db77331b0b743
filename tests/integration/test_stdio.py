"""The server over stdio, driven by the Python SDK 2.x (discover first, then legacy)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from conftest import ALL_TOOLS, BIN, stdio_params

pytestmark = pytest.mark.anyio



@pytest.fixture
def anyio_backend():
    return "asyncio"


async def test_discover_flow_lists_tools(data_dir: Path):
    async with Client(stdio_params(data_dir)) as client:
        assert client.protocol_version == "2026-07-28"
        tools = await client.list_tools()
        assert [t.name for t in tools.tools] == ALL_TOOLS
        for tool in tools.tools:
            # Short and exact; the whole list is budgeted in crates/server/tests/tool_list.rs.
            assert tool.description and len(tool.description) < 400


@pytest.mark.parametrize("version", ["2025-06-18", "2025-11-25"])
def test_initialize_negotiates_the_clients_version(data_dir: Path, version: str):
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    out = subprocess.run(
        [str(BIN), "--data-dir", str(data_dir), "serve"],
        input="".join(json.dumps(m) + "\n" for m in lines),
        capture_output=True, text=True, timeout=30,
    )
    # Every stdout line is a protocol message; logs went to stderr.
    replies = [json.loads(line) for line in out.stdout.splitlines()]
    assert replies[0]["result"]["protocolVersion"] == version
    assert [t["name"] for t in replies[1]["result"]["tools"]] == ALL_TOOLS
    assert "INFO" in out.stderr and "INFO" not in out.stdout


@pytest.mark.parametrize("kind", ["files", "socket"])
def test_stdio_on_files_and_sockets(data_dir: Path, tmp_path: Path, kind: str):
    # Pipes (what the SDKs use) and stream sockets (what Node's child_process uses) are read and written
    # in place; anything else through tokio's stdin and stdout. Both must carry the protocol.
    import socket

    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "write_workspace_file", "arguments": {"filename": "a.txt", "content": "hi"}}},
    ]
    text = "".join(json.dumps(m) + "\n" for m in lines)
    argv = [str(BIN), "--data-dir", str(data_dir), "--log-level", "error", "serve"]
    if kind == "files":
        (tmp_path / "in.jsonl").write_text(text)
        with open(tmp_path / "in.jsonl") as stdin, open(tmp_path / "out.jsonl", "w") as stdout:
            subprocess.run(argv, stdin=stdin, stdout=stdout, timeout=30, check=True)
        out = (tmp_path / "out.jsonl").read_text()
    else:
        ours, theirs = socket.socketpair()
        with ours, theirs:
            proc = subprocess.Popen(argv, stdin=theirs, stdout=theirs)
            theirs.close()
            ours.sendall(text.encode())
            ours.shutdown(socket.SHUT_WR)
            chunks = []
            while chunk := ours.recv(65536):
                chunks.append(chunk)
            assert proc.wait(timeout=30) == 0
        out = b"".join(chunks).decode()
    replies = [json.loads(line) for line in out.splitlines()]
    assert [r["id"] for r in replies] == [1, 2]
    assert replies[1]["result"]["structuredContent"]["success"] is True
    assert (data_dir / "workspace" / "a.txt").read_text() == "hi"


def test_stdio_pipes_stay_blocking_for_others(data_dir: Path):
    # The server reads and writes its pipes without blocking, through descriptions of its own: a process
    # that shares its stdin or stdout (here, this one, which keeps its copies) still sees them blocking.
    r_in, w_in = os.pipe()
    r_out, w_out = os.pipe()
    proc = subprocess.Popen([str(BIN), "--data-dir", str(data_dir), "--log-level", "error", "serve"],
                            stdin=r_in, stdout=w_out)
    try:
        hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                 "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}
        os.write(w_in, (json.dumps(hello) + "\n").encode())
        with os.fdopen(os.dup(r_out), "rb") as out:
            assert json.loads(out.readline())["id"] == 1
        assert os.get_blocking(r_in) and os.get_blocking(w_out)
    finally:
        os.close(w_in)
        assert proc.wait(timeout=30) == 0
        for fd in (r_in, r_out, w_out):
            os.close(fd)


async def test_write_read_list_round_trip(data_dir: Path):
    async with Client(stdio_params(data_dir)) as client:
        written = await client.call_tool("write_workspace_file", {"filename": "notes/today.md", "content": "# hi\nünïcode"})
        assert not written.is_error
        assert written.structured_content["success"] is True
        assert written.structured_content["size"] == len("# hi\nünïcode".encode())
        # The text content carries the same JSON as structuredContent.
        assert json.loads(written.content[0].text) == written.structured_content

        read = await client.call_tool("read_workspace_file", {"filename": "notes/today.md"})
        assert read.structured_content["content"] == "# hi\nünïcode"

        listed = await client.call_tool("list_workspace_files", {})
        paths = {f["path"]: f["type"] for f in listed.structured_content["files"]}
        assert paths == {"notes": "directory", "notes/today.md": "file"}
        assert listed.structured_content["count"] == 2

        sub = await client.call_tool("list_workspace_files", {"subpath": "notes"})
        assert [f["path"] for f in sub.structured_content["files"]] == ["notes/today.md"]
    # It really is on disk, under the data dir, for later executions to share.
    assert (data_dir / "workspace" / "notes" / "today.md").read_text() == "# hi\nünïcode"


@pytest.mark.parametrize(
    "tool, args, expected",
    [
        ("write_workspace_file", {"filename": "a.txt"}, "missing required argument 'content'"),
        ("write_workspace_file", {"filename": 7, "content": "x"}, "argument 'filename' must be a string, got a number"),
        ("write_workspace_file", {"filename": "a.txt", "content": "x", "mode": "a"}, "unknown argument 'mode'"),
        ("read_workspace_file", {}, "missing required argument 'filename'"),
        ("read_workspace_file", {"filename": "nope.txt"}, "does not exist in the workspace"),
        ("list_workspace_files", {"subpath": "missing"}, "does not exist in the workspace"),
        ("get_execution_stats", {"verbose": True}, "this tool takes no arguments"),
    ],
)
async def test_bad_arguments_are_tool_errors(data_dir: Path, tool: str, args: dict, expected: str):
    async with Client(stdio_params(data_dir)) as client:
        result = await client.call_tool(tool, args)
        assert result.is_error
        assert result.structured_content["success"] is False
        assert expected in result.structured_content["error"]
        # The server is still serving after the error.
        ok = await client.call_tool("list_workspace_files", {})
        assert not ok.is_error


@pytest.mark.parametrize("path", ["../escape.txt", "a/../../escape.txt", "/etc/passwd", "/tmp/x", "a\x00b", ""])
async def test_traversal_is_refused(data_dir: Path, path: str):
    async with Client(stdio_params(data_dir)) as client:
        w = await client.call_tool("write_workspace_file", {"filename": path, "content": "pwned"})
        r = await client.call_tool("read_workspace_file", {"filename": path})
        assert w.is_error and r.is_error
        assert "invalid path" in w.structured_content["error"]
    assert not (data_dir / "escape.txt").exists()
    assert not (data_dir.parent / "escape.txt").exists()


async def test_symlink_out_of_the_workspace_is_not_followed(data_dir: Path, tmp_path: Path):
    secret = tmp_path / "host-secret.txt"
    secret.write_text("do not read me")
    ws = data_dir / "workspace"
    ws.mkdir(parents=True, exist_ok=True)
    os.symlink(secret, ws / "innocent.txt")
    os.symlink(tmp_path, ws / "dir")
    async with Client(stdio_params(data_dir)) as client:
        r = await client.call_tool("read_workspace_file", {"filename": "innocent.txt"})
        assert r.is_error and "outside the workspace" in r.structured_content["error"]
        assert "do not read me" not in r.content[0].text
        r = await client.call_tool("read_workspace_file", {"filename": "dir/host-secret.txt"})
        assert r.is_error
        w = await client.call_tool("write_workspace_file", {"filename": "dir/planted.txt", "content": "x"})
        assert w.is_error
    assert not (tmp_path / "planted.txt").exists()
    assert secret.read_text() == "do not read me"


async def test_write_size_limit(data_dir: Path, tmp_path: Path):
    config = tmp_path / "cfg.json"
    config.write_text(json.dumps({"workspace": {"max_file_bytes": 100}}))
    params = stdio_params(data_dir)
    params.args = ["--config", str(config), *params.args]
    async with Client(params) as client:
        big = await client.call_tool("write_workspace_file", {"filename": "big.txt", "content": "x" * 101})
        assert big.is_error
        # Refused at dispatch, from the schema's maxLength (characters), naming the argument.
        assert "'content'" in big.structured_content["error"]
        assert "over the 100" in big.structured_content["error"]
        # Fewer characters than the limit, more bytes: the workspace's own limit is in bytes.
        wide = await client.call_tool("write_workspace_file", {"filename": "wide.txt", "content": "é" * 60})
        assert wide.is_error
        assert "over the limit of 100 bytes" in wide.structured_content["error"]
        small = await client.call_tool("write_workspace_file", {"filename": "ok.txt", "content": "x" * 100})
        assert not small.is_error
    assert not (data_dir / "workspace" / "big.txt").exists()
    assert not (data_dir / "workspace" / "wide.txt").exists()


async def test_unknown_tool_is_a_protocol_error(data_dir: Path):
    async with Client(stdio_params(data_dir)) as client:
        with pytest.raises(MCPError, match="unknown tool 'rm_rf'"):
            await client.call_tool("rm_rf", {})


async def test_execution_stats(data_dir: Path, tmp_path: Path):
    config = tmp_path / "cfg.json"
    config.write_text(json.dumps({
        "mcpServers": {
            "git": {"command": "uvx", "args": ["mcp-server-git"], "env": {"GIT_TOKEN": "super-secret-value"}},
            "remote": {"type": "http", "url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer hdr-secret"}},
        },
        "sandbox": {"timeout_seconds": 12},
    }))
    params = stdio_params(data_dir)
    params.args = ["--config", str(config), *params.args]
    async with Client(params) as client:
        await client.call_tool("write_workspace_file", {"filename": "a.txt", "content": "12345"})
        stats = await client.call_tool("get_execution_stats", {})
        s = stats.structured_content
        assert s["workspace"]["files"] == 1 and s["workspace"]["bytes"] == 5
        assert s["limits"]["timeout_seconds"] == 12
        assert s["config"] == str(config)
        assert {u["name"]: u["type"] for u in s["upstream_servers"]} == {"git": "stdio", "remote": "http"}
        assert s["sandbox"]["mode"] == "isolated"
        assert {l["name"] for l in s["sandbox"]["layers"] if l["on"]} >= {"namespaces", "seccomp", "landlock", "minimal root"}
        # Credentials from the config never come back to the model.
        assert "super-secret-value" not in stats.content[0].text
        assert "hdr-secret" not in stats.content[0].text


async def test_legacy_initialize_mode(data_dir: Path):
    async with Client(stdio_params(data_dir), mode="legacy") as client:
        assert client.protocol_version == "2025-11-25"
        tools = await client.list_tools()
        assert len(tools.tools) == len(ALL_TOOLS)


async def test_minimal_tool_set(data_dir: Path):
    async with Client(stdio_params(data_dir, "--tools", "minimal")) as client:
        tools = await client.list_tools()
        names = {t.name for t in tools.tools}
        assert names == {"execute_code", "search_tools", "get_tool_definition"}
        with pytest.raises(MCPError, match="unknown tool"):
            await client.call_tool("write_workspace_file", {"filename": "a", "content": "b"})


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_ends_stdio_serving_cleanly(data_dir: Path, sig: int):
    proc = subprocess.Popen([str(BIN), "--data-dir", str(data_dir), "serve"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}
    proc.stdin.write(json.dumps(init) + "\n")
    proc.stdin.flush()
    assert json.loads(proc.stdout.readline())["id"] == 1
    proc.send_signal(sig)
    # stdin stays open: the signal alone must end the process.
    assert proc.wait(timeout=10) == 0
    assert "shut down cleanly" in proc.stderr.read()
