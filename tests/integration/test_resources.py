"""Workspace files and skills as MCP resources, with real clients (the Python SDK 2.x, in the 2026-07-28 mode and
in legacy mode): listing, templates, reading (text and binary, personal data tokenized as the tools do), change
notifications for subscribers (`subscriptions/listen` and the legacy `resources/subscribe`), and resource links
to the files an execution wrote.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import anyio
import pytest
from mcp import Client, MCPError
from mcp.shared.subscriptions import ResourceUpdated

from conftest import stdio_params

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def seed(client: Client) -> None:
    await client.call_tool("write_workspace_file", {"filename": "notes/a.txt", "content": "hello from a"})
    await client.call_tool("execute_code", {"code": "open('blob.bin', 'wb').write(bytes(range(256)))"})
    await client.call_tool("save_skill", {"name": "twice", "description": "Doubles a number",
                                          "code": "def twice(x):\n    return 2 * x\n"})


async def test_files_and_skills_are_listed_and_read(data_dir: Path):
    async with Client(stdio_params(data_dir)) as client:
        assert client.server_capabilities.resources is not None
        await seed(client)
        listed = {str(r.uri): r for r in (await client.list_resources()).resources}
        assert {"workspace://notes/a.txt", "workspace://blob.bin", "skill://twice"} <= set(listed), listed
        assert listed["workspace://notes/a.txt"].size == len("hello from a")
        assert listed["skill://twice"].description == "Doubles a number"
        templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
        assert templates == {"workspace://{path}", "skill://{name}"}

        text = (await client.read_resource("workspace://notes/a.txt")).contents[0]
        assert text.text == "hello from a"
        blob = (await client.read_resource("workspace://blob.bin")).contents[0]
        assert base64.b64decode(blob.blob) == bytes(range(256))
        code = (await client.read_resource("skill://twice")).contents[0]
        assert "return 2 * x" in code.text
        for bad in ("workspace://missing.txt", "workspace://../etc/passwd", "skill://nope", "file:///etc/passwd"):
            with pytest.raises(MCPError):
                await client.read_resource(bad)


async def test_reading_a_resource_tokenizes_personal_data_like_the_tool(data_dir: Path, tmp_path: Path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"pii": {"mode": "auto"}}))
    params = stdio_params(data_dir)
    params.args = ["--config", str(config), *params.args]
    async with Client(params) as client:
        await client.call_tool("execute_code", {"code": "open('people.txt', 'w').write('ana@example.com')"})
        content = (await client.read_resource("workspace://people.txt")).contents[0].text
        assert "ana@example.com" not in content and "[EMAIL_" in content, content
        # Raw bytes cannot be searched for personal data: not served in automatic mode.
        await client.call_tool("execute_code", {"code": "open('latin.csv', 'wb').write(b'Jos\\xe9;ana@example.com')"})
        with pytest.raises(MCPError, match="execute_code"):
            await client.read_resource("workspace://latin.csv")


async def test_an_executions_answer_links_the_files_it_wrote(data_dir: Path):
    async with Client(stdio_params(data_dir)) as client:
        await client.call_tool("write_workspace_file", {"filename": "old.txt", "content": "untouched"})
        code = "open('report.csv', 'w').write('a,b\\n1,2\\n')\nimport os\nos.makedirs('out', exist_ok=True)\n" \
               "open('out/chart.txt', 'w').write('***')\nresult = 'written'"
        result = await client.call_tool("execute_code", {"code": code})
        links = [c for c in result.content if c.type == "resource_link"]
        assert sorted(str(link.uri) for link in links) == ["workspace://out/chart.txt", "workspace://report.csv"]
        assert {link.name: link.size for link in links} == {"out/chart.txt": 3, "report.csv": 8}
        assert result.structured_content["files_written"] == [{"path": "out/chart.txt", "size": 3},
                                                              {"path": "report.csv", "size": 8}]
        # A link reads back as the resource it names.
        assert (await client.read_resource("workspace://report.csv")).contents[0].text == "a,b\n1,2\n"
        quiet = await client.call_tool("execute_code", {"code": "result = 1"})
        assert not [c for c in quiet.content if c.type == "resource_link"]


async def test_a_listener_is_told_when_a_subscribed_file_changes(data_dir: Path):
    async with Client(stdio_params(data_dir)) as client:
        assert client.protocol_version == "2026-07-28"
        await client.call_tool("write_workspace_file", {"filename": "watched.txt", "content": "v1"})
        async with client.listen(resource_subscriptions=["workspace://watched.txt", "skill://twice"]) as sub:
            assert set(sub.honored.resource_subscriptions) == {"workspace://watched.txt", "skill://twice"}
            await client.call_tool("write_workspace_file", {"filename": "other.txt", "content": "not watched"})
            await client.call_tool("execute_code", {"code": "open('watched.txt', 'w').write('v2 from code')"})
            await client.call_tool("save_skill", {"name": "twice", "description": "Doubles",
                                                  "code": "def twice(x):\n    return 2 * x\n"})
            seen = []
            with anyio.fail_after(10):
                async for event in sub:
                    assert isinstance(event, ResourceUpdated), event
                    seen.append(str(event.uri))
                    if len(seen) == 2:
                        break
        assert seen == ["workspace://watched.txt", "skill://twice"], seen


async def test_a_legacy_subscriber_gets_resources_updated(data_dir: Path):
    updates: list[str] = []

    async def on_message(message) -> None:
        root = getattr(message, "root", message)
        if getattr(root, "method", None) == "notifications/resources/updated":
            updates.append(str(root.params.uri))

    async with Client(stdio_params(data_dir), mode="legacy", message_handler=on_message) as client:
        assert client.protocol_version != "2026-07-28"
        with pytest.raises(MCPError):
            await client.subscribe_resource("file:///etc/passwd")  # not ours: it can never change here
        await client.subscribe_resource("workspace://log.txt")  # not written yet: may be watched
        await client.call_tool("write_workspace_file", {"filename": "log.txt", "content": "one"})
        await client.call_tool("write_workspace_file", {"filename": "unwatched.txt", "content": "x"})
        with anyio.fail_after(10):
            while not updates:
                await anyio.sleep(0.05)
        await client.unsubscribe_resource("workspace://log.txt")
        await client.call_tool("write_workspace_file", {"filename": "log.txt", "content": "two"})
        await anyio.sleep(0.5)
    assert updates == ["workspace://log.txt"], updates
