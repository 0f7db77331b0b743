"""Other real clients in use today: Python SDK 1.x, the TypeScript SDK, the Inspector CLI."""

from __future__ import annotations

import base64
import json
import os
import struct
import subprocess
from pathlib import Path

import pytest

from conftest import ALL_TOOLS, BIN, CLIENTS, JS, SDK1_PYTHON, HttpServer

NODE_ENV = {**os.environ, "NO_COLOR": "1"}


def run_json(cmd: list[str], env: dict | None = None, cwd: Path | None = None, expect_code: int = 0) -> dict:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=cwd, stdin=subprocess.DEVNULL)
    assert out.returncode == expect_code, f"{cmd} exited {out.returncode}:\n{out.stdout}\n{out.stderr}"
    start = out.stdout.index("{")
    return json.loads(out.stdout[start:])


def png_size(b64: str) -> tuple[int, int]:
    data = base64.b64decode(b64)
    assert data.startswith(b"\x89PNG\r\n\x1a\n"), data[:8]
    return struct.unpack(">II", data[16:24])


def check_chart(chart: dict) -> None:
    """An image block and a table the client read from one execute_code answer."""
    assert chart["types"] == ["text", "image", "resource_link"], chart["types"]
    assert chart["text"] == "|n|s|\n|-|-|\n|1|a|\n|2|b|", chart["text"]
    assert chart["mime"] == "image/png" and png_size(chart["image"]) == (40, 20)
    assert chart["structured"]["result"] == [{"n": 1, "s": "a"}, {"n": 2, "s": "b"}]
    assert chart["structured"]["table"] == {"columns": ["n", "s"], "rows": 2}


def check_client_result(result: dict, prefix: str) -> None:
    check_chart(result["chart"])
    assert result["tools"] == ALL_TOOLS
    assert result["written"]["success"] is True
    assert result["read"]["content"].startswith("from ")
    assert result["bad"]["isError"] is True
    assert result["bad"]["structured"]["success"] is False
    assert "invalid path" in result["bad"]["structured"]["error"]


@pytest.fixture(scope="module")
def sdk1() -> Path:
    if not SDK1_PYTHON.exists():
        pytest.fail(f"{SDK1_PYTHON} is missing; scripts/test creates it")
    return SDK1_PYTHON


def test_python_sdk1_stdio(sdk1: Path, data_dir: Path):
    result = run_json([str(sdk1), str(CLIENTS / "sdk1_client.py"), "stdio", str(BIN), str(data_dir)])
    assert result["protocolVersion"] in ("2025-06-18", "2025-11-25")
    check_client_result(result, "sdk1")
    assert (data_dir / "workspace" / "sdk1" / "hello.txt").read_text() == "from sdk 1"


def test_python_sdk1_http(sdk1: Path, authed_server: HttpServer):
    result = run_json([str(sdk1), str(CLIENTS / "sdk1_client.py"), "http", authed_server.url, "test-token-123"])
    check_client_result(result, "sdk1")


def test_typescript_sdk_stdio(data_dir: Path):
    result = run_json(["node", str(CLIENTS / "ts_sdk_client.mjs"), "stdio", str(BIN), str(data_dir)], env=NODE_ENV)
    assert result["server"]["name"] == "code-execution-mcp"
    check_client_result(result, "ts")


def test_typescript_sdk_http(authed_server: HttpServer):
    result = run_json(["node", str(CLIENTS / "ts_sdk_client.mjs"), "http", authed_server.url, "test-token-123"], env=NODE_ENV)
    assert result["protocolVersion"] in ("2025-06-18", "2025-11-25")
    check_client_result(result, "ts")


def inspector(*args: str, home: Path, expect_code: int = 0) -> dict:
    cli = JS / "node_modules" / ".bin" / "mcp-inspector"
    # The inspector keeps a catalog under HOME; give it a private one.
    env = {**NODE_ENV, "HOME": str(home)}
    return run_json(["node", str(cli), "--cli", *args], env=env, expect_code=expect_code)


def test_inspector_cli_stdio(data_dir: Path, tmp_path: Path):
    listed = inspector("--method", "tools/list", "--strict", "--",
                       str(BIN), "--data-dir", str(data_dir), "--log-level", "warn", "serve", home=tmp_path)
    assert [t["name"] for t in listed["tools"]] == ALL_TOOLS
    written = inspector("--method", "tools/call", "--tool-name", "write_workspace_file",
                        "--tool-arg", "filename=inspector.txt", "content=hello inspector", "--",
                        str(BIN), "--data-dir", str(data_dir), "--log-level", "warn", "serve", home=tmp_path)
    assert written["structuredContent"]["success"] is True
    assert (data_dir / "workspace" / "inspector.txt").read_text() == "hello inspector"
    code = ("show(b'<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"40\" height=\"20\"/>'); "
            "result = [{'n': 1, 's': 'a'}, {'n': 2, 's': 'b'}]")
    chart = inspector("--method", "tools/call", "--tool-name", "execute_code", "--tool-arg", f"code={code}", "--",
                      str(BIN), "--data-dir", str(data_dir), "--log-level", "warn", "serve", home=tmp_path)
    image = next(b for b in chart["content"] if b["type"] == "image")
    check_chart({"types": [b["type"] for b in chart["content"]], "text": chart["content"][0]["text"],
                 "image": image["data"], "mime": image["mimeType"], "structured": chart["structuredContent"]})


def test_inspector_cli_http(authed_server: HttpServer, data_dir: Path, tmp_path: Path):
    (data_dir / "workspace").mkdir(parents=True, exist_ok=True)
    (data_dir / "workspace" / "seed.txt").write_text("seeded")
    read = inspector("--method", "tools/call", "--tool-name", "read_workspace_file", "--tool-arg", "filename=seed.txt",
                     "--header", "Authorization: Bearer test-token-123", "--", authed_server.url, home=tmp_path)
    assert read["structuredContent"]["content"] == "seeded"
    bad = inspector("--method", "tools/call", "--tool-name", "read_workspace_file", "--tool-arg", "filename=/etc/shadow",
                    "--header", "Authorization: Bearer test-token-123", "--", authed_server.url, home=tmp_path,
                    expect_code=5)  # the inspector's exit code for a tool that answered isError
    assert bad["isError"] is True
