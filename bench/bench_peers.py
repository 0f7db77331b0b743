"""This server against FastMCP's code mode, side by side, the same scenarios interleaved.

    PEER_PYTHON=.test-env/peers/bin/python /usr/bin/python3 bench/bench_peers.py BIN [--rounds N] [--json]

Both servers run over stdio, each with the same upstream (bench/peers/rows_server.py, on the MCP
Python SDK 1.x of scripts/test's .test-env/sdk1) started by itself; one client (the MCP Python SDK
2.x of .test-env/sdk2, run as a child so this script needs no packages) drives both. Each round
runs every scenario on both servers, in alternating order, so drift in the machine falls on both.

Scenarios (the same work in each server's dialect: ours sets `result`, the peer's code `return`s
and `await`s its calls):

  trivial    one constant
  calls_100  100 upstream calls in a loop, summed
  rows_20k   one upstream call of 20,000 records, filtered and aggregated in the sandbox
  cpu        a pure-Python loop of 300,000 steps
  tokens     the o200k tokens of each answer's text content (the model's share), for `rows_20k`

Each figure is the median (and p90) over the rounds, in ms of the client's wall time per call;
the ratio is ours over the peer's (below 1: we are faster).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from tokens.wire import TokenCounter  # noqa: E402

SCENARIOS = {
    "trivial": ("result = 1", "return 1"),
    "calls_100": (
        "total = 0\nfor i in range(100):\n    total += call_tool('bench.add', {'a': i, 'b': 1})['sum']\nresult = total",
        "total = 0\nfor i in range(100):\n    r = await call_tool('add', {'a': i, 'b': 1})\n    total += r['sum']\nreturn total",
    ),
    "rows_20k": (
        "rows = call_tool('bench.rows', {'n': 20000})['rows']\nkept = [r for r in rows if r['group'] == 3]\n"
        "result = {'n': len(kept), 'total': sum(r['value'] for r in kept)}",
        "data = await call_tool('rows', {'n': 20000})\nkept = [r for r in data['rows'] if r['group'] == 3]\n"
        "return {'n': len(kept), 'total': sum(r['value'] for r in kept)}",
    ),
    "cpu": (
        "s = 0\nfor i in range(300000):\n    s += i * i % 7\nresult = s",
        "s = 0\nfor i in range(300000):\n    s += i * i % 7\nreturn s",
    ),
}

# Runs inside .test-env/sdk2's interpreter: times each call and reports what came back.
CLIENT = r'''
import json, sys, time, anyio
from mcp import Client, StdioServerParameters

async def main():
    spec = json.loads(sys.argv[1])
    out = {}
    async with Client(StdioServerParameters(command=spec["ours"][0], args=spec["ours"][1:])) as ours, \
               Client(StdioServerParameters(command=spec["peer"][0], args=spec["peer"][1:])) as peer:
        servers = {"ours": (ours, "execute_code"), "peer": (peer, "execute")}
        for _ in range(2):  # warm both: first imports, first upstream start
            for name, (client, tool) in servers.items():
                for scenario, codes in spec["scenarios"].items():
                    await client.call_tool(tool, {"code": codes[0 if name == "ours" else 1]})
        for r in range(spec["rounds"]):
            order = ["ours", "peer"] if r % 2 == 0 else ["peer", "ours"]
            for scenario, codes in spec["scenarios"].items():
                for name in order:
                    client, tool = servers[name]
                    t = time.perf_counter()
                    answer = await client.call_tool(tool, {"code": codes[0 if name == "ours" else 1]})
                    ms = (time.perf_counter() - t) * 1000
                    text = "".join(b.text for b in answer.content if b.type == "text")
                    body = answer.structured_content
                    if name == "ours":
                        value = body.get("result")
                    elif isinstance(body, dict) and "result" in body:
                        value = body["result"]
                    else:
                        try:
                            value = json.loads(text)
                        except ValueError:
                            value = text
                    entry = out.setdefault(scenario, {}).setdefault(name, {"ms": [], "value": None, "text": ""})
                    entry["ms"].append(ms)
                    entry["value"], entry["text"], entry["error"] = value, text, bool(answer.is_error)
    print(json.dumps(out))

anyio.run(main)
'''


def percentile(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p * (len(values) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--rounds", type=int, default=int(os.environ.get("CEM_BENCH_ROUNDS", "30")))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    env = REPO / ".test-env"
    peer_python = os.environ.get("PEER_PYTHON", str(env / "peers" / "bin" / "python"))
    sdk1, sdk2 = env / "sdk1" / "bin" / "python", env / "sdk2" / "bin" / "python"
    for path in (peer_python, sdk1, sdk2):
        if not Path(path).exists():
            raise SystemExit(f"{path} is missing: scripts/test builds .test-env, scripts/bench peers the peer's")
    upstream = [str(sdk1), str(HERE / "peers" / "rows_server.py")]
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        config = Path(tmp) / "config.json"
        config.write_text(json.dumps({"mcpServers": {"bench": {"command": upstream[0], "args": upstream[1:]}}}))
        spec = {
            "ours": [args.binary, "--config", str(config), "--data-dir", str(Path(tmp) / "data"),
                     "--log-level", "error", "serve"],
            "peer": [peer_python, str(HERE / "peers" / "fastmcp_code_mode.py"), *upstream],
            "scenarios": SCENARIOS,
            "rounds": args.rounds,
        }
        run = subprocess.run([str(sdk2), "-c", CLIENT, json.dumps(spec)], capture_output=True, text=True,
                             timeout=3600, env={**os.environ, "FASTMCP_SHOW_SERVER_BANNER": "false"})
        if run.returncode != 0:
            raise SystemExit(f"the client failed:\n{run.stderr[-4000:]}")
        raw = json.loads(run.stdout)
    counter = TokenCounter(args.binary)
    rows = []
    for scenario, sides in raw.items():
        ours, peer = sides["ours"], sides["peer"]
        if ours["error"] or peer["error"] or json.dumps(ours["value"]) != json.dumps(peer["value"]):
            raise SystemExit(f"{scenario}: the answers differ: ours {ours['value']!r} ({ours['text'][:300]!r}), "
                             f"peer {peer['value']!r} ({peer['text'][:300]!r})")
        row = {"scenario": scenario}
        for name, side in (("ours", ours), ("peer", peer)):
            row[f"{name}_p50_ms"] = round(statistics.median(side["ms"]), 2)
            row[f"{name}_p90_ms"] = round(percentile(side["ms"], 0.9), 2)
            row[f"{name}_text_tokens"] = counter.count(side["text"])
        row["ratio_p50"] = round(row["ours_p50_ms"] / row["peer_p50_ms"], 2)
        rows.append(row)
    counter.close()
    report = {
        "rounds": args.rounds,
        "machine": f"{os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}",
        "peer": subprocess.run([peer_python, "-c", "import fastmcp; print(fastmcp.__version__)"],
                               capture_output=True, text=True).stdout.strip(),
        "scenarios": rows,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"FastMCP {report['peer']} code mode against this server, {args.rounds} rounds interleaved, "
          f"{report['machine']}; ms per call, client wall time:\n")
    print("| scenario | ours p50 | ours p90 | peer p50 | peer p90 | ratio p50 | text tokens ours / peer |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['scenario']} | {r['ours_p50_ms']} | {r['ours_p90_ms']} | {r['peer_p50_ms']} | "
              f"{r['peer_p90_ms']} | {r['ratio_p50']}x | {r['ours_text_tokens']} / {r['peer_text_tokens']} |")


if __name__ == "__main__":
    main()
