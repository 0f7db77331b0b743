"""What tenants' search state holds, shared or their own, and what releasing it gives back, in one run.

    /usr/bin/python3 bench/bench_idle_search.py target/release/code-execution-mcp [--tenants 20] [--tools 3000]

(scripts/bench idle-search runs it; it needs scripts/test's .test-env for the MCP Python SDK 1.x the upstream
runs on.) One server over HTTP with a static token per tenant, `sandbox.tenant_idle_seconds` 20 and metrics on,
and one upstream whose tools are generated (a description and three described parameters each, as real servers'
are). Each tenant (after saving a skill of its own, in the runs marked so) searches once, reads one definition
after it (a use: learning records it) and searches again; then all idle. The server's RSS is read at the start
(the first tenant's search done), with every tenant's catalog held, and once `cem_search_catalogs` says they
were released (plus the server's 10 s heap trim). Four runs: 3,000 tools without skills (every tenant searches
the one shared catalog), 3,000 tools with a skill each (each its own catalog), and one tool each way, so that
what the tenants hold besides their catalogs (their engines, which are released for idleness too) is taken out:
the difference is the search state.

Then, with the catalogs released, each tenant's next search (the catalog built again from the cached tool list
and vectors, or the shared one taken) against a search with it held: medians, milliseconds, one request at a
time.

Prints one JSON object. Everything stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_hostile import SDK1, Tenant, rss_kb, start_server, stop_server, token, unmount_under  # noqa: E402

IDLE_SECONDS = 20
# The server hands freed heap pages back every 10 s (crates/cli/src/memory.rs).
TRIM_SECONDS = 12

SERVER = '''
import sys
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
import mcp.types as types
import anyio

COUNT = int(sys.argv[1])
VERBS = ["create", "list", "get", "update", "delete", "search", "export", "import", "archive", "sync"]
NOUNS = ["invoice", "customer", "ticket", "deployment", "dataset", "report", "channel", "repository",
         "calendar event", "payment", "shipment", "contract", "alert", "dashboard", "playlist", "document"]
server = Server("generated")

def tool(i):
    verb, noun = VERBS[i % len(VERBS)], NOUNS[(i // len(VERBS)) % len(NOUNS)]
    return types.Tool(
        name=f"{verb}_{noun.replace(' ', '_')}_{i}",
        description=f"{verb.capitalize()} a {noun} in workspace {i // 160}. Returns the {noun} as JSON, "
                    f"with its id, owner, timestamps and status; fails when the caller lacks access.",
        inputSchema={"type": "object", "properties": {
            "id": {"type": "string", "description": f"The {noun}'s id, as the list call returns it"},
            "fields": {"type": "array", "items": {"type": "string"}, "description": "Fields to return"},
            "dry_run": {"type": "boolean", "description": "Check without changing anything"},
        }, "required": ["id"]})

TOOLS = [tool(i) for i in range(COUNT)]

@server.list_tools()
async def list_tools():
    return TOOLS

@server.call_tool()
async def call_tool(name, arguments):
    return [types.TextContent(type="text", text="ok")]

async def main():
    async with stdio_server() as (r, w):
        await server.run(r, w, server.create_initialization_options())

anyio.run(main)
'''


def catalogs(metrics_port: int) -> int:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    m = re.search(r"^cem_search_catalogs (\S+)$", text, re.M)
    return int(float(m.group(1))) if m else -1


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_run(binary: str, tools: int, tenants: int, tmp: Path, skills: bool) -> dict:
    run = f"{tools}-{'skills' if skills else 'none'}"
    data = tmp / f"data-{run}"
    data.mkdir()
    server_py = tmp / "generated_server.py"
    server_py.write_text(SERVER)
    names = [f"person{i}" for i in range(tenants)]
    config = tmp / f"config-{run}.json"
    config.write_text(json.dumps({
        "mcpServers": {"generated": {"command": str(SDK1), "args": [str(server_py), str(tools)]}},
        "auth": {"tokens": {n: token(n) for n in names}},
        "sandbox": {"tenant_idle_seconds": IDLE_SECONDS},
    }))
    metrics_port = free_port()
    log = tmp / f"server-{run}.log"
    proc, port = start_server(binary, data, config, log, "--log-level", "info",
                              serve=("--metrics", f"127.0.0.1:{metrics_port}"))
    try:
        people = [Tenant(port, n) for n in names]
        query = {"query": "export the customer report as json", "detail_level": "name", "limit": 5}
        if skills:
            for person in people:
                saved = person.call("save_skill", {"name": "weekly_total", "description": "Sums a week of numbers",
                                                   "code": "def main(numbers):\n    return sum(numbers)\n"})
                assert saved.get("success") is not False, saved
        # The tool list and its vectors cached, one catalog built: the start.
        found = people[0].call("search_tools", query)
        assert found.get("tools"), found
        time.sleep(TRIM_SECONDS)
        start = rss_kb(proc.pid)
        held_ms = []
        for person in people:
            first = person.call("search_tools", query)
            person.call("get_tool_definition", {"tool_name": first["tools"][0]})
            t = time.perf_counter()
            again = person.call("search_tools", query)
            held_ms.append((time.perf_counter() - t) * 1000)
            assert again["tools"][0] == first["tools"][0], (first, again)
        time.sleep(TRIM_SECONDS)
        held = rss_kb(proc.pid)
        held_catalogs = catalogs(metrics_port)
        deadline = time.monotonic() + IDLE_SECONDS * 4
        while catalogs(metrics_port) > 0 and time.monotonic() < deadline:
            time.sleep(1)
        released_catalogs = catalogs(metrics_port)
        time.sleep(TRIM_SECONDS)
        released = rss_kb(proc.pid)
        rebuilt_ms = []
        for person in people:
            t = time.perf_counter()
            person.call("search_tools", query)
            rebuilt_ms.append((time.perf_counter() - t) * 1000)
        return {
            "tools": tools,
            "tenants": tenants,
            "a_skill_each": skills,
            "catalogs_held": held_catalogs,
            "catalogs_after_idle": released_catalogs,
            "rss_start_mb": round(start / 1024, 1),
            "rss_held_mb": round(held / 1024, 1),
            "rss_released_mb": round(released / 1024, 1),
            "search_held_ms_p50": round(statistics.median(held_ms), 2),
            "search_after_release_ms_p50": round(statistics.median(rebuilt_ms), 2),
        }
    finally:
        stop_server(proc, data)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--tenants", type=int, default=20)
    parser.add_argument("--tools", type=int, default=3000)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="cem-idle-search-"))
    try:
        shared = one_run(args.binary, args.tools, args.tenants, tmp, skills=False)
        own = one_run(args.binary, args.tools, args.tenants, tmp, skills=True)
        one = one_run(args.binary, 1, args.tenants, tmp, skills=True)
        one_shared = one_run(args.binary, 1, args.tenants, tmp, skills=False)
    finally:
        unmount_under(tmp)
        shutil.rmtree(tmp, ignore_errors=True)

    def grew(run: dict) -> float:
        return run["rss_held_mb"] - run["rss_start_mb"]

    def gave_back(run: dict) -> float:
        return run["rss_held_mb"] - run["rss_released_mb"]

    print(json.dumps({
        "shared_no_skills": shared,
        "own_a_skill_each": own,
        "one_tool_a_skill_each": one,
        "one_tool_no_skills": one_shared,
        "own_catalog_per_tenant_mb": round((grew(own) - grew(one)) / args.tenants, 2),
        "shared_catalog_per_tenant_mb": round((grew(shared) - grew(one_shared)) / args.tenants, 2),
        "own_catalogs_given_back_mb": round(gave_back(own) - gave_back(one), 1),
        "first_search_after_release_over_held": round(own["search_after_release_ms_p50"] / own["search_held_ms_p50"], 2),
    }, indent=2))


if __name__ == "__main__":
    main()
