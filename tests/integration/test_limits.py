"""Argument sizes: every tool's input schema bounds its arguments, and a call over a bound is refused,
naming the argument, before any work (the server's own tools) or before it reaches the upstream (tools
called from code, held to what the upstream's schema declares)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client

from conftest import SDK1_PYTHON, HttpServer, stdio_params

pytestmark = pytest.mark.anyio

FAULT = str(Path(__file__).parent / "servers" / "fault_server.py")


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def test_a_five_megabyte_tool_name_is_refused_by_its_bound_not_searched(http_server: HttpServer):
    async with Client(http_server.url) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        # The bound is in the schema the agent reads.
        assert listed["get_tool_definition"].input_schema["properties"]["tool_name"]["maxLength"] == 512
        assert listed["write_workspace_file"].input_schema["properties"]["content"]["maxLength"] == 10 << 20
        name = "get_tool_" * (5_000_000 // 9)
        answer = await client.call_tool("get_tool_definition", {"tool_name": name})
        error = answer.structured_content["error"]
        assert answer.is_error and error.startswith(
            f"get_tool_definition: argument 'tool_name' is {len(name)} characters long, over the 512"), error
        assert "send at most 512 characters" in error and len(error) < 400, error
        # Within the bound, longer than any name: a plain refusal, no search for close names.
        long = await client.call_tool("get_tool_definition", {"tool_name": "x" * 500})
        assert long.is_error and "no tool has a name that long" in long.structured_content["error"], long
        # Characters are counted, not bytes: 512 four-byte characters are within the bound.
        wide = await client.call_tool("get_tool_definition", {"tool_name": "😀" * 512})
        assert wide.is_error and "no tool named" in wide.structured_content["error"], wide
        # Nested: one requirement's length, by its place in the array.
        code = await client.call_tool("execute_code", {"code": "result = 1", "requirements": ["p" * 201]})
        assert code.is_error and "argument 'requirements[0]' is 201 characters long, over the 200" in \
            code.structured_content["error"], code


async def test_an_upstream_bound_is_held_before_the_call_reaches_it(data_dir: Path, tmp_path: Path):
    notes = tmp_path / "notes.txt"
    config = tmp_path / "mcp_config.json"
    config.write_text(json.dumps({"mcpServers": {
        "fault": {"command": str(SDK1_PYTHON), "args": [FAULT], "env": {"FAULT_NOTES_FILE": str(notes)}}}}))
    params = stdio_params(data_dir)
    params.args = ["--config", str(config), *params.args]
    code = """
def attempt(args):
    try:
        return call_tool("fault.note", args)
    except Exception as e:
        return "error: " + str(e)

result = {
    "short": attempt({"text": "é" * 50}),
    "long": attempt({"text": "x" * 51}),
    "tag": attempt({"text": "ok", "tags": ["fine", "much too long"]}),
}
"""
    async with Client(params) as client:
        answer = await client.call_tool("execute_code", {"code": code, "timeout_seconds": 60})
        body = answer.structured_content
        assert body["success"], body
        result = body["result"]
    # Fifty two-byte characters: within maxLength 50, and the upstream got it.
    assert result["short"] == {"result": "noted 50"}, result
    assert "fault.note: refused before it reached the server: argument 'text' is 51 characters long, " \
        "over the 50 the tool's input schema allows (maxLength)" in result["long"], result
    # A bound inside anyOf (an optional list) and items, as pydantic writes it.
    assert "argument 'tags[1]' is 13 characters long, over the 8" in result["tag"], result
    assert notes.read_text() == "é" * 50 + "\n", "only the call within its bounds reached the upstream"
