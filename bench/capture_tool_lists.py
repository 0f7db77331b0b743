"""Capture the tool lists of the eleven benchmark MCP servers, for the tool-search evaluation.

For each server of bench/tokens/agents.py's ALL_SERVERS (filesystem, memory, git, sqlite, time,
everything, sequential-thinking, fetch, github, playwright, excel) this script starts the server
exactly as the benchmark does (`server_spec`, with a fresh temporary state directory), sends
`initialize`, records the result's `serverInfo` and `instructions` (null when absent), lists
every tool with `tools/list` (following `nextCursor` pagination), and writes

    crates/catalog/tests/search_eval/servers/<name>.json

as {"server": <bench name>, "server_info": {...}, "instructions": <string or null>,
    "tools": [<each tool object exactly as the server returned it>]}
(pretty JSON, indent 1, non-ASCII kept as is). The temporary state directory is machine-specific
and some servers mention it (excel's instructions name its workbook directory), so every string
in the output has that directory replaced by the placeholder "$STATE", to keep reruns comparable.

Standard library only; no credentials or network needed. Rerun with:

    bench/setup && /usr/bin/python3 bench/capture_tool_lists.py [server ...]

With server names as arguments only those are captured; by default all eleven.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from tokens.agents import ALL_SERVERS, check_installed, server_spec  # noqa: E402
from tokens.wire import StdioClient  # noqa: E402

STATE_PLACEHOLDER = "$STATE"
OUT = BENCH.parent / "crates" / "catalog" / "tests" / "search_eval" / "servers"


def without_state(value, state: str):
    """`value` with every occurrence of the state directory in its strings replaced by $STATE."""
    if isinstance(value, str):
        return value.replace(state, STATE_PLACEHOLDER)
    if isinstance(value, list):
        return [without_state(v, state) for v in value]
    if isinstance(value, dict):
        return {k: without_state(v, state) for k, v in value.items()}
    return value


def capture(name: str, state: Path, logs: Path) -> dict:
    state.mkdir(parents=True)
    (state / "files").mkdir()  # root of the filesystem server and EXCEL_FILES_PATH
    spec = server_spec(name, state)
    client = StdioClient(name, [spec["command"], *spec["args"]], env=spec.get("env"),
                         stderr_path=str(logs / f"{name}.err"))
    try:
        init = client.log[0].result  # the initialize exchange, made by the constructor
        tools: list = []
        cursor = None
        while True:
            ex = client.request("tools/list", {"cursor": cursor} if cursor else {})
            tools.extend(ex.result.get("tools", []))
            cursor = ex.result.get("nextCursor")
            if not cursor:
                break
    finally:
        client.close()
    doc = {"server": name, "server_info": init.get("serverInfo", {}),
           "instructions": init.get("instructions"), "tools": tools}
    return without_state(doc, str(state))


def main(argv: list[str]) -> int:
    check_installed()
    names = argv or ALL_SERVERS
    unknown = [n for n in names if n not in ALL_SERVERS]
    if unknown:
        raise SystemExit(f"unknown servers: {', '.join(unknown)} (known: {', '.join(ALL_SERVERS)})")
    OUT.mkdir(parents=True, exist_ok=True)
    failed = []
    with tempfile.TemporaryDirectory(prefix="capture-tools-") as tmp:
        logs = Path(tmp) / "logs"
        logs.mkdir()
        for name in names:
            try:
                doc = capture(name, Path(tmp) / "state" / name, logs)
            except Exception as e:  # noqa: BLE001 - reported, the others still run
                err = (logs / f"{name}.err")
                tail = err.read_text(errors="replace")[-2000:] if err.exists() else ""
                print(f"{name}: FAILED: {e}\n{tail}", file=sys.stderr)
                failed.append(name)
                continue
            path = OUT / f"{name}.json"
            path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
            info = doc["server_info"]
            print(f"{name:20} {len(doc['tools']):3} tools  {info.get('name', '?')} {info.get('version', '?')}"
                  f"  -> {path.relative_to(BENCH.parent)}")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
