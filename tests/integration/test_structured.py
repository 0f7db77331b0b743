"""Every tool of ours declares an outputSchema, and every answer's structuredContent matches it: successes and
errors alike, checked with jsonschema against the schema the server itself lists, through the Python SDK."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from mcp import Client

from conftest import ALL_TOOLS, stdio_params

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


# One successful call of each tool, in an order where each finds what it needs (a file, a skill, a token).
CALLS = [
    ("write_workspace_file", {"filename": "notes/a.txt", "content": "hello"}),
    ("read_workspace_file", {"filename": "notes/a.txt"}),
    ("list_workspace_files", {}),
    ("execute_code", {"code": "print('hi')\nresult = {'n': 1}"}),
    ("execute_code", {"code": "result = 1", "session_id": "s"}),
    ("search_tools", {"query": "skill"}),
    ("list_tool_categories", {}),
    ("get_execution_stats", {}),
    ("sanitize_pii", {"text": "mail ana@example.com"}),
    ("restore_pii", {"text": "[EMAIL_1]"}),
    ("save_skill", {"name": "twice", "description": "Doubles", "code": "def twice(x):\n    return 2 * x\n"}),
    ("load_skill", {"name": "twice"}),
    ("list_skills", {}),
    ("get_tool_definition", {"tool_name": "twice"}),
    ("delete_skill", {"name": "twice"}),
]

# And a failing call of each kind: a tool error, failed code, a bad argument.
FAILURES = [
    ("read_workspace_file", {"filename": "missing.txt"}),
    ("execute_code", {"code": "1 / 0"}),
    ("execute_code", {"code": "x", "timeout_seconds": 0}),
    ("load_skill", {"name": "nope"}),
    ("get_tool_definition", {"tool_name": "no_such_tool"}),
    ("delete_skill", {"name": "nope"}),
]


async def test_every_answer_matches_its_tools_declared_output_schema(data_dir: Path):
    async with Client(stdio_params(data_dir)) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert sorted(listed) == sorted(ALL_TOOLS)
        for name, tool in listed.items():
            assert tool.output_schema and tool.output_schema.get("type") == "object", name
            jsonschema.Draft202012Validator.check_schema(tool.output_schema)
        called = set()
        for name, args in CALLS + FAILURES:
            result = await client.call_tool(name, args)
            expect_error = (name, args) in FAILURES
            assert bool(result.is_error) == expect_error, (name, args, result)
            structured = result.structured_content
            assert structured is not None, (name, result)
            if name == "execute_code":
                # The model reads the lean text; the figures stay structured.
                assert "execution_time_ms" not in result.content[0].text, result.content
            else:
                # The text block carries the same JSON, for clients that read only text.
                assert json.loads(result.content[0].text) == structured, name
            jsonschema.validate(structured, listed[name].output_schema)
            assert structured["success"] is (not expect_error), (name, structured)
            if not expect_error:
                called.add(name)
        assert called == set(ALL_TOOLS), f"every tool was exercised: missing {set(ALL_TOOLS) - called}"


def test_a_schema_that_lies_is_caught():
    """The check above can fail: an answer missing its declared type is refused by the same validator."""
    schema = {"type": "object", "properties": {"success": {"type": "boolean"}, "size": {"type": "integer"}},
              "required": ["success"]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"success": True, "size": "12"}, schema)
