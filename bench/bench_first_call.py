"""What the first upstream call adds to the server's memory, and what stays.

    /usr/bin/python3 bench/bench_first_call.py target/release/code-execution-mcp [--idle SECONDS]

Two servers over stdio, one without upstreams and one with bench/peers/rows_server.py (on
scripts/test's .test-env/sdk1). Each runs one execution (the second one's calls the upstream
once), then idles. Measured: the server process's RSS (VmRSS, MiB) after start, after the
execution, and after `--idle` seconds (default 80: the o200k vocabulary is let go after 60 s
unused, and the heap is trimmed every 10 s).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from tokens.wire import StdioClient  # noqa: E402


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def measure(binary: str, servers: dict, code: str, idle: float, tmp: Path) -> dict:
    config = tmp / "config.json"
    config.write_text(json.dumps({"mcpServers": servers, "sandbox": {"pool_size": 1}}))
    client = StdioClient("cem", [binary, "--config", str(config), "--data-dir", str(tmp / "data"),
                                 "--log-level", "error", "serve"])
    try:
        pid = client.proc.pid
        time.sleep(3)
        started = rss_mib(pid)
        result = client.request("tools/call", {"name": "execute_code", "arguments": {"code": code}}).result
        if result.get("isError"):
            raise SystemExit(f"the execution failed: {result['content'][0]['text'][:500]}")
        time.sleep(1)
        after = rss_mib(pid)
        time.sleep(idle)
        return {"start_mib": started, "after_call_mib": after, "after_idle_mib": rss_mib(pid)}
    finally:
        client.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--idle", type=float, default=80)
    args = ap.parse_args()
    sdk1 = HERE.parent / ".test-env" / "sdk1" / "bin" / "python"
    upstream = {"bench": {"command": str(sdk1), "args": [str(HERE / "peers" / "rows_server.py")]}}
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as a, \
            tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as b:
        without = measure(args.binary, {}, "result = sum(range(10))", args.idle, Path(a))
        with_upstream = measure(args.binary, upstream, "result = call_tool('bench.add', {'a': 1, 'b': 2})",
                                args.idle, Path(b))
    report = {"without_upstreams": without, "with_an_upstream_call": with_upstream,
              "difference_after_idle_mib": round(with_upstream["after_idle_mib"] - without["after_idle_mib"], 1),
              "idle_seconds": args.idle}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
