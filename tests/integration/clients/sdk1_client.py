"""Drives the server with the Python SDK 1.x and prints one JSON object.

Run by the integration tests under a virtualenv that has mcp 1.x installed.
Usage: sdk1_client.py stdio BIN DATA_DIR | sdk1_client.py http URL [TOKEN]
"""

import json
import sys

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamablehttp_client


# A picture and a table in one answer, without packages: SVG drawn by the host.
CHART = (
    "show(b'<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"40\" height=\"20\">"
    "<rect width=\"20\" height=\"20\" fill=\"red\"/></svg>')\n"
    "result = [{'n': 1, 's': 'a'}, {'n': 2, 's': 'b'}]"
)


async def exercise(session: ClientSession) -> dict:
    init = await session.initialize()
    tools = await session.list_tools()
    written = await session.call_tool("write_workspace_file", {"filename": "sdk1/hello.txt", "content": "from sdk 1"})
    read = await session.call_tool("read_workspace_file", {"filename": "sdk1/hello.txt"})
    bad = await session.call_tool("write_workspace_file", {"filename": "../outside.txt", "content": "x"})
    chart = await session.call_tool("execute_code", {"code": CHART})
    return {
        "chart": {
            "types": [b.type for b in chart.content],
            "text": chart.content[0].text,
            "image": next((b.data for b in chart.content if b.type == "image"), None),
            "mime": next((b.mimeType for b in chart.content if b.type == "image"), None),
            "structured": chart.structuredContent,
        },
        "protocolVersion": init.protocolVersion,
        "server": init.serverInfo.name,
        "tools": [t.name for t in tools.tools],
        "written": written.structuredContent,
        "read": read.structuredContent,
        "bad": {"isError": bad.isError, "structured": bad.structuredContent},
    }


async def main() -> None:
    mode, target = sys.argv[1], sys.argv[2]
    if mode == "stdio":
        params = StdioServerParameters(command=target, args=["--data-dir", sys.argv[3], "--log-level", "warn", "serve"])
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                result = await exercise(session)
    else:
        headers = {"Authorization": f"Bearer {sys.argv[3]}"} if len(sys.argv) > 3 else None
        async with streamablehttp_client(target, headers=headers) as (read, write, _):
            async with ClientSession(read, write) as session:
                result = await exercise(session)
    print(json.dumps(result))


anyio.run(main)
