"""Wrappers from hostile metadata (issue 57): one upstream's tool names and texts cannot break another
server's Python package, nor its own ordinary tools'."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from mcp import Client

from conftest import stdio_params

pytestmark = pytest.mark.anyio

HOSTILE = str(Path(__file__).parent / "servers" / "hostile_server.py")
LONG = "x" * 300 + "_tool"


@pytest.fixture
def anyio_backend():
    return "asyncio"


def hostile_tools() -> list:
    def tool(name, description="A tool.", properties=None):
        return {"name": name, "description": description,
                "inputSchema": {"type": "object", "properties": properties or {}}}

    return [
        # A file name past 255 bytes: the whole run stopped with ENAMETOOLONG.
        tool(LONG),
        # Rust's `{:?}` escapes of these (\u{0}, \u{2028}) are not Python.
        tool("nul_text", "Reads\u0000 a file\u2028and stops.",
             {"mode": {"type": "string", "enum": ["a\u0000", "\u2028"], "description": "How\u0000"}}),
        tool("odd_params", "Odd parameter names.",
             {"a\u200bb": {"type": "string"}, "x\u2028": {"type": "string"}, "del\u007f": {"type": "string"},
              "class": {"type": "string"}, "2fa": {"type": "string"}}),
        tool("!!!"),
        tool("echo", "Answers its name.", {"text": {"type": "string"}}),
    ]


CODE = """
import inspect
from servers.zzz_plain import echo
plain = echo(text="hi")
import servers.aaa_hostile as h
odd = h.odd_params
names = list(inspect.signature(odd).parameters)
long = [n for n in h.__all__ if n.startswith("xxxxxxxx")]
result = {
    "plain": str(plain),
    "hostile_echo": str(h.echo(text="x")),
    "nul_text": str(h.nul_text(mode="a\\x00")),
    "odd": str(odd(**{n: "v" for n in names})),
    "odd_names": names,
    "long": [str(getattr(h, n)()) for n in long],
    "all": sorted(h.__all__),
    "doc": h.nul_text.__doc__,
}
"""


async def test_a_hostile_upstream_breaks_neither_another_servers_wrappers_nor_its_own(data_dir: Path,
                                                                                        tmp_path: Path):
    tools_file = tmp_path / "hostile_tools.json"
    tools_file.write_text(json.dumps(hostile_tools()))
    servers = {
        # Sorted first: its failure stopped every server after it.
        "aaa_hostile": {"command": sys.executable, "args": [HOSTILE], "env": {"HOSTILE_TOOLS_FILE": str(tools_file)}},
        "zzz_plain": {"command": sys.executable, "args": [HOSTILE]},
    }
    config = tmp_path / "mcp_config.json"
    config.write_text(json.dumps({"mcpServers": servers}))
    params = stdio_params(data_dir)
    params.args = ["--config", str(config), *params.args]
    async with Client(params) as client:
        # A search lists both servers and writes every server's wrappers in one run.
        found = await client.call_tool("search_tools", {"query": "echo", "detail_level": "name"})
        assert not found.is_error, found
        answer = await client.call_tool("execute_code", {"code": CODE})
        body = answer.structured_content
        assert body["success"] is True, body
        got = body["result"]
        assert got["plain"].startswith("called echo"), got
        assert got["hostile_echo"].startswith("called echo"), got
        assert got["nul_text"].startswith("called nul_text"), got
        assert got["odd"].startswith("called odd_params"), got
        assert got["long"] and got["long"][0].startswith("called " + LONG), got
        names = got["odd_names"]
        assert len(names) == 5 and all(n.isidentifier() for n in names) and "class_" in names, names
        assert "\x00" not in got["doc"] and "\u2028" not in got["doc"], got["doc"]
        assert "echo" in got["all"] and "nul_text" in got["all"] and len(got["all"]) == 5, got["all"]
        # The definition's Python lines are Python: its import and call_tool line run.
        definition = await client.call_tool("get_tool_definition", {"tool_name": "aaa_hostile.odd_params"})
        python = definition.structured_content["python"]
        assert python["import"] == "from servers.aaa_hostile import odd_params", python
        compile(python["call_tool"].replace("{...}", "{}"), "call_tool", "eval")
