"""What pii.mode auto costs a tool call from code: every tool answer is tokenized before the code sees it.

    .test-env/sdk2/bin/python bench/bench_pii_results.py BINARY [--rounds 9]

(any Python with the MCP Python SDK; scripts/bench pii-results runs it.) Two stdio servers with the same
server-filesystem upstream, `pii.mode` "auto" and "manual", taking turns call by call so a noisy
neighbour slows both alike. The code reads a CSV of people (names, emails, phone numbers, amounts; about
one value in four is personal data) of 0.1, 1 and 8 MB through the filesystem server and returns its
length. Prints one JSON object: medians in milliseconds, the ratio auto / manual, and what auto adds per
MB.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

REPO = Path(__file__).resolve().parents[1]
FILESYSTEM = REPO / "tests" / "js" / "node_modules" / "@modelcontextprotocol" / "server-filesystem" / "dist" / "index.js"


def people_csv(path: Path, megabytes: float) -> None:
    lines = ["name,email,phone,amount"]
    size, i = 0, 0
    while size < megabytes * (1 << 20):
        line = f"Person {i},person{i}.name@example.com,+1 415 555 {1000 + i % 9000:04d},{(i * 37) % 1000}.{i % 100:02d}"
        lines.append(line)
        size += len(line) + 1
        i += 1
    path.write_text("\n".join(lines))


async def server(stack: AsyncExitStack, binary: str, root: Path, mode: str) -> ClientSession:
    data = Path(tempfile.mkdtemp(prefix=f"cem-pii-{mode}-"))
    config = data / "config.json"
    config.write_text(json.dumps({
        "mcpServers": {"filesystem": {"command": "node", "args": [str(FILESYSTEM), str(root)]}},
        "pii": {"mode": mode},
    }))
    params = StdioServerParameters(command=binary, args=["--data-dir", str(data / "d"), "--config", str(config),
                                                         "--log-level", "warn", "serve"])
    read, write = await stack.enter_async_context(stdio_client(params))
    session = await stack.enter_async_context(ClientSession(read, write))
    await session.initialize()
    return session


async def timed(session: ClientSession, code: str) -> float:
    started = time.perf_counter()
    answer = await session.call_tool("execute_code", {"code": code, "timeout_seconds": 120})
    took = (time.perf_counter() - started) * 1000
    body = answer.structured_content
    if not body.get("success"):
        raise RuntimeError(json.dumps(body)[:500])
    return took


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="cem-pii-files-"))
    sizes = [0.1, 1, 8]
    for mb in sizes:
        people_csv(root / f"people-{mb}.csv", mb)
    out = {"rounds": args.rounds, "sizes_mb": sizes, "medians_ms": {}}
    async with AsyncExitStack() as stack:
        sessions = {mode: await server(stack, args.binary, root, mode) for mode in ("auto", "manual")}
        for mb in sizes:
            code = (f"text = call_tool('filesystem.read_text_file', {{'path': {str(root / f'people-{mb}.csv')!r}}})"
                    "['content']\nresult = len(text)")
            times = {"auto": [], "manual": []}
            for mode, session in sessions.items():
                await timed(session, code)  # warm: the upstream starts, the file is cached
            for _ in range(args.rounds):
                for mode, session in sessions.items():
                    times[mode].append(await timed(session, code))
            auto, manual = statistics.median(times["auto"]), statistics.median(times["manual"])
            out["medians_ms"][f"{mb} MB"] = {"auto": round(auto, 1), "manual": round(manual, 1),
                                             "ratio": round(auto / manual, 2),
                                             "auto_adds_ms_per_mb": round((auto - manual) / mb, 1)}
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    asyncio.run(main())
