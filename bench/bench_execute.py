"""Latency benchmarks of execute_code, each against a yardstick measured in the same run.

1. Round trip of trivial code through the server over stdio (JSON-RPC lines,
   no SDK in the way): warm pool against no pool, paced like an agent (a
   pause between calls, so the pool can refill) and back to back. Yardstick:
   starting `/usr/bin/python3 -I -S -c pass`.
2. Data processing: filtering a 1,000,000-row list of dicts inside the
   sandbox against the same code in bare CPython (timed inside the code, so
   only the work is compared).

Prints a JSON report; scripts/bench writes it into BENCHMARKS.md.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.argv[1] if len(sys.argv) > 1 else "target/release/code-execution-mcp").resolve()
ROUNDS = int(os.environ.get("CEM_BENCH_ROUNDS", "200"))
PAUSE = float(os.environ.get("CEM_BENCH_PAUSE", "0.15"))


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    k = (len(values) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def summary(ms: list[float]) -> dict:
    return {"p50_ms": round(pct(ms, 0.5), 2), "p99_ms": round(pct(ms, 0.99), 2), "n": len(ms)}


class StdioServer:
    def __init__(self, data_dir: Path, pool_size: int, sandbox: dict | None = None):
        config = data_dir / "cfg.json"
        config.write_text(json.dumps({"sandbox": {"pool_size": pool_size, **(sandbox or {})}}))
        self.proc = subprocess.Popen(
            [str(BIN), "--config", str(config), "--data-dir", str(data_dir), "--log-level", "error", "serve"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
        )
        self.next_id = 0
        self.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                    "clientInfo": {"name": "bench", "version": "1"}})
        self.notify("notifications/initialized")

    def notify(self, method: str) -> None:
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": method}) + "\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict) -> dict:
        self.next_id += 1
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}) + "\n")
        self.proc.stdin.flush()
        while True:
            msg = json.loads(self.proc.stdout.readline())
            if msg.get("id") == self.next_id:
                return msg

    def execute(self, code: str, **extra) -> dict:
        msg = self.request("tools/call", {"name": "execute_code", "arguments": {"code": code, **extra}})
        return msg["result"]["structuredContent"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def round_trips(pool_size: int, pause: float) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        server = StdioServer(Path(tmp), pool_size)
        try:
            server.execute("result = 0")  # probe the host, fill the pool
            time.sleep(1.0)
            times = []
            for _ in range(ROUNDS):
                t0 = time.perf_counter()
                body = server.execute("result = 1 + 1")
                times.append((time.perf_counter() - t0) * 1000)
                assert body["result"] == 2, body
                if pause:
                    time.sleep(pause)
            return times
        finally:
            server.close()


def yardstick() -> list[float]:
    times = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        subprocess.run(["/usr/bin/python3", "-I", "-S", "-c", "pass"], check=True)
        times.append((time.perf_counter() - t0) * 1000)
    return times


FILTER = """
import time
rows = [{"id": i, "group": i % 7, "value": (i * 7919) % 1000} for i in range(1_000_000)]
t0 = time.perf_counter()
kept = [r for r in rows if r["group"] == 3 and r["value"] > 500]
elapsed = time.perf_counter() - t0
result = {"kept": len(kept), "seconds": elapsed}
"""


def data_processing(runs: int = 7) -> dict:
    sandboxed, bare = [], []
    with tempfile.TemporaryDirectory() as tmp:
        server = StdioServer(Path(tmp), 1)
        try:
            for _ in range(runs):
                body = server.execute(FILTER, memory_mb=2048, timeout_seconds=120)
                sandboxed.append(body["result"]["seconds"] * 1000)
                out = subprocess.run(["/usr/bin/python3", "-I", "-c", FILTER + "\nimport json; print(json.dumps(result))"],
                                     capture_output=True, text=True, check=True)
                bare.append(json.loads(out.stdout)["seconds"] * 1000)
                time.sleep(0.3)
        finally:
            server.close()
    s, b = statistics.median(sandboxed), statistics.median(bare)
    return {"sandboxed_median_ms": round(s, 1), "bare_median_ms": round(b, 1), "ratio": round(s / b, 3), "runs": runs}


REPO = Path(__file__).resolve().parents[1]


def five_upstreams(root: Path) -> dict:
    mcp = REPO / "tests" / "js" / "node_modules" / "@modelcontextprotocol"
    py = os.environ.get("CEM_SERVERS_PYTHON", str(REPO / ".test-env" / "servers" / "bin" / "python"))
    return {
        "everything": {"command": "node", "args": [str(mcp / "server-everything" / "dist" / "index.js"), "stdio"]},
        "git": {"command": py, "args": ["-m", "mcp_server_git"]},
        "time": {"command": py, "args": ["-m", "mcp_server_time"]},
        "filesystem": {"command": "node", "args": [str(mcp / "server-filesystem" / "dist" / "index.js"), str(root)]},
        "memory": {"command": "node", "args": [str(mcp / "server-memory" / "dist" / "index.js")]},
    }


def first_tools_list(upstreams: dict, runs: int = 15) -> list[float]:
    """Milliseconds from starting `serve` to the answer of its first tools/list."""
    times = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            config = Path(tmp) / "cfg.json"
            config.write_text(json.dumps({"mcpServers": upstreams}))
            t0 = time.perf_counter()
            proc = subprocess.Popen(
                [str(BIN), "--config", str(config), "--data-dir", tmp, "--log-level", "error", "serve"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
            )
            for msg in [
                {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "b", "version": "1"}}},
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            ]:
                proc.stdin.write(json.dumps(msg) + "\n")
            proc.stdin.flush()
            while json.loads(proc.stdout.readline()).get("id") != 2:
                pass
            times.append((time.perf_counter() - t0) * 1000)
            proc.stdin.close()
            proc.wait(timeout=30)
    return times


CALL_CODE = """
import time, asyncio
ts = []
call_tool("everything.echo", {"message": "x"})
for _ in range(200):
    t0 = time.perf_counter(); call_tool("everything.echo", {"message": "x"}); ts.append((time.perf_counter() - t0) * 1000)
ts.sort()
# The bridge alone: a call the host refuses at once (no upstream involved).
hop = []
for _ in range(200):
    t0 = time.perf_counter()
    try:
        call_tool("no_such_server.x", {})
    except ToolError:
        pass
    hop.append((time.perf_counter() - t0) * 1000)
hop.sort()
t0 = time.perf_counter()
for _ in range(20):
    await asyncio.gather(*(call_tool_async("everything.echo", {"message": "x"}) for _ in range(50)))
result = {"p50_ms": ts[100], "p99_ms": ts[198], "calls_per_second": 1000 / (time.perf_counter() - t0),
          "bridge_only_p50_ms": hop[100]}
"""


# The same call once the server is warm (its JIT done): 300 untimed calls, then 500 timed, on
# both sides. The echo gets faster, so the bridge's fixed cost weighs more in the ratio.
STEADY_WARMUP, STEADY_CALLS = 300, 500
STEADY_CODE = f"""
import time
for _ in range({STEADY_WARMUP}):
    call_tool("everything.echo", {{"message": "x"}})
ts = []
for _ in range({STEADY_CALLS}):
    t0 = time.perf_counter(); call_tool("everything.echo", {{"message": "x"}}); ts.append((time.perf_counter() - t0) * 1000)
ts.sort()
result = {{"p50_ms": ts[len(ts) // 2]}}
"""

# Enough rounds that the median of the per-round ratios moves less than the noise of one round: a
# round's ratio swings by tens of percent on a shared 2-core VM (CPU placement, idle-state wake-ups).
CALL_ROUNDS = int(os.environ.get("CEM_BENCH_CALL_ROUNDS", "31"))


def spread(ratios: list[float]) -> dict:
    """Median, quartiles, extremes, and the distribution-free 95% interval of the median (the order
    statistics n/2 -+ 0.98 sqrt(n)): the median's run-to-run wobble, from one run."""
    xs = sorted(ratios)
    n = len(xs)
    k = max(0, int(n / 2 - 0.98 * n ** 0.5))
    q = lambda f: xs[min(n - 1, int(f * n))]
    return {"median": round(statistics.median(xs), 3), "p25": round(q(0.25), 3), "p75": round(q(0.75), 3),
            "min": round(xs[0], 3), "max": round(xs[-1], 3), "median_95ci": [round(xs[k], 3), round(xs[n - 1 - k], 3)]}


def tool_calls() -> dict:
    """One echo call from sandboxed code against a direct rmcp client call (`tools call`), same server.

    The two alternate for CALL_ROUNDS rounds of 200 sequential calls each, so a noisy neighbour
    slows both sides alike; the ratio is the median of the rounds' ratios of medians."""
    mcp = REPO / "tests" / "js" / "node_modules" / "@modelcontextprotocol"
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "cfg.json"
        config.write_text(json.dumps({
            "mcpServers": {"everything": {"command": "node", "args": [str(mcp / "server-everything" / "dist" / "index.js"), "stdio"]}},
            "sandbox": {"max_tool_calls": 5000},
        }))
        base = [str(BIN), "--config", str(config), "--data-dir", tmp, "--log-level", "error"]
        def direct(*extra):
            out = subprocess.run([*base, "tools", "call", "everything.echo", "--args", '{"message": "x"}', *extra],
                                 capture_output=True, text=True, check=True)
            return json.loads(out.stdout)
        rounds, steady = [], []
        for _ in range(CALL_ROUNDS):
            one = direct("--repeat", "200")
            out = subprocess.run([*base, "exec", "-"], input=CALL_CODE, capture_output=True, text=True, check=True)
            rounds.append((one, json.loads(out.stdout)["result"]))
            warm = direct("--warmup", str(STEADY_WARMUP), "--repeat", str(STEADY_CALLS))
            out = subprocess.run([*base, "exec", "-", "--timeout", "120"], input=STEADY_CODE, capture_output=True,
                                 text=True, check=True)
            steady.append((warm["p50_ms"], json.loads(out.stdout)["result"]["p50_ms"]))
        fifty = direct("--repeat", "1000", "--concurrency", "50")
    med = lambda xs: statistics.median(xs)
    return {
        "rounds": CALL_ROUNDS,
        "direct_rmcp": {"p50_ms": round(med([d["p50_ms"] for d, _ in rounds]), 3),
                        "p99_ms": round(med([d["p99_ms"] for d, _ in rounds]), 3),
                        "calls_per_second_50_concurrent": round(fifty["calls_per_second"])},
        "from_sandboxed_code": {"p50_ms": round(med([s["p50_ms"] for _, s in rounds]), 3),
                                "p99_ms": round(med([s["p99_ms"] for _, s in rounds]), 3),
                                "calls_per_second_50_concurrent": round(med([s["calls_per_second"] for _, s in rounds]))},
        "ratio_p50_per_round": [round(s["p50_ms"] / d["p50_ms"], 3) for d, s in rounds],
        "ratio_p50": round(med([s["p50_ms"] / d["p50_ms"] for d, s in rounds]), 3),
        "ratio_spread": spread([s["p50_ms"] / d["p50_ms"] for d, s in rounds]),
        "steady": {"warmup_calls": STEADY_WARMUP, "calls": STEADY_CALLS,
                   "direct_rmcp_p50_ms": round(med([d for d, _ in steady]), 3),
                   "from_sandboxed_code_p50_ms": round(med([s for _, s in steady]), 3),
                   "ratio_p50": round(med([s / d for d, s in steady]), 3),
                   "ratio_spread": spread([s / d for d, s in steady]),
                   "ratio_p50_per_round": [round(s / d, 3) for d, s in steady]},
        "bridge_round_trip_without_upstream_p50_ms": round(med([s["bridge_only_p50_ms"] for _, s in rounds]), 3),
        "pipe_round_trip_between_two_processes_p50_ms": pipe_round_trip(),
    }


PIPE_PING = """
import os, time
r1, w1 = os.pipe(); r2, w2 = os.pipe()
if os.fork() == 0:
    os.close(w1)  # else the echo never sees the end of its input
    while (b := os.read(r1, 64)):
        os.write(w2, b)
    os._exit(0)
os.close(r1)
ts = []
for _ in range(2000):
    t = time.perf_counter(); os.write(w1, b"x"); os.read(r2, 64); ts.append(time.perf_counter() - t)
os.close(w1)
print(sorted(ts)[1000] * 1000)
"""


def pipe_round_trip() -> float:
    """The floor of any process boundary on this machine: one byte there and back over pipes."""
    out = subprocess.run(["/usr/bin/python3", "-c", PIPE_PING], capture_output=True, text=True, check=True)
    return round(float(out.stdout), 4)


def machine() -> dict:
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release(),
            "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)}


def main() -> None:
    report = {"machine": machine(), "rounds": ROUNDS, "pause_s": PAUSE}
    report["yardstick_python_startup"] = summary(yardstick())
    report["warm_pool_paced"] = summary(round_trips(pool_size=2, pause=PAUSE))
    report["no_pool_paced"] = summary(round_trips(pool_size=0, pause=PAUSE))
    report["warm_pool_back_to_back"] = summary(round_trips(pool_size=2, pause=0))
    y = report["yardstick_python_startup"]["p50_ms"]
    report["warm_p50_over_yardstick_p50"] = round(report["warm_pool_paced"]["p50_ms"] / y, 3)
    report["no_pool_p50_over_yardstick_p50"] = round(report["no_pool_paced"]["p50_ms"] / y, 3)
    report["data_processing_1m_rows"] = data_processing()
    report["tool_call"] = tool_calls()
    with tempfile.TemporaryDirectory() as root:
        none = first_tools_list({})
        five = first_tools_list(five_upstreams(Path(root)))
    report["serve_to_first_tools_list"] = {
        "no_upstreams": summary(none),
        "five_upstreams": summary(five),
        "ratio_p50": round(pct(five, 0.5) / pct(none, 0.5), 3),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
