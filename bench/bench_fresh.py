"""A fresh sandbox per execution: forked from the zygote against built cold, in one run.

    .test-env/sdk2/bin/python bench/bench_fresh.py BINARY [--rounds 200] [--seconds 8]

(any Python with the MCP Python SDK; scripts/bench fresh runs it.) Every figure is a session-less
`execute_code` of `result = 1`, so each one gets a brand-new sandbox:

1. Back to back over stdio, through the MCP Python SDK's client (what an agent's SDK sees) and through
   bare JSON-RPC lines (the server's own cost): the zygote and the cold path, each with the default warm
   pool (4 forked, 2 cold) and with none. Blocks of 25 calls per server, the servers taking turns, so a
   noisy neighbour slows all alike: each block is a burst of 25 back to back that starts with the pool
   the other servers' turns let it refill. Then, through the SDK, the zygote's sustained: 300 calls in
   one block, where the pool is drained after the first few and every call waits on the refill, and 30
   blocks of 10 with 100 ms between them; `burst_spread_ms` gives p50, p90 and p99 of these bursts.
   The yardstick is `/usr/bin/python3 -I -S -c pass`, measured in the same run. Then, over bare lines,
   the pooled servers paced: one call every 30 ms (an agent thinks between calls).
2. Executions per second from 20 concurrent HTTP clients (stateless requests, each its own keep-alive
   connection): zygote and cold, twice each, alternated.
3. CPU time per execution, the server, the zygote and every sandbox together: the server runs in a
   cgroup of its own whose CPU counter (cpuacct, or cpu.stat on v2) includes every process that was
   ever in it, over 300 back-to-back executions (the 2 s idle after them included, when the last
   interpreters end and the pool refills).

Prints one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_cluster import start_node, throughput  # noqa: E402

CALL = {"name": "execute_code", "arguments": {"code": "result = 1"}}
BLOCK = 25
MODES = {
    "zygote, default pool": {"zygote": True},
    "zygote, no pool": {"zygote": True, "pool_size": 0},
    "cold, default pool": {"zygote": False},
    "cold, no pool": {"zygote": False, "pool_size": 0},
}


def config_file(sandbox: dict) -> Path:
    d = Path(tempfile.mkdtemp(prefix="cem-fresh-"))
    (d / "cfg.json").write_text(json.dumps({"sandbox": sandbox}))
    return d


class Lines:
    """A bare MCP client: JSON-RPC lines over the server's stdio."""

    def __init__(self, binary: str, sandbox: dict):
        d = config_file(sandbox)
        self.proc = subprocess.Popen(
            [binary, "--config", str(d / "cfg.json"), "--data-dir", str(d), "--log-level", "error", "serve"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.ids = iter(range(1, 1 << 30))
        self.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                    "clientInfo": {"name": "bench", "version": "1"}})
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict) -> dict:
        n = next(self.ids)
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": n, "method": method, "params": params}) + "\n")
        self.proc.stdin.flush()
        while True:
            message = json.loads(self.proc.stdout.readline())
            if message.get("id") == n:
                if "error" in message or message["result"].get("isError"):
                    raise RuntimeError(message)
                return message

    def call(self) -> None:
        self.request("tools/call", CALL)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def back_to_back_lines(binary: str, rounds: int) -> dict:
    servers = {name: Lines(binary, sandbox) for name, sandbox in MODES.items()}
    times: dict[str, list[float]] = {name: [] for name in servers}
    for s in servers.values():
        for _ in range(5):
            s.call()
    time.sleep(1)
    for _ in range(max(1, rounds // BLOCK)):
        for name, s in servers.items():
            for _ in range(BLOCK):
                t = time.perf_counter()
                s.call()
                times[name].append((time.perf_counter() - t) * 1000)
    # Paced: calls 30 ms apart, as an agent that thinks between them (the pool refills meanwhile).
    paced: dict[str, list[float]] = {name: [] for name in servers if "default pool" in name}
    for _ in range(max(1, rounds // BLOCK)):
        for name in paced:
            for _ in range(BLOCK // 5):
                time.sleep(0.03)
                t = time.perf_counter()
                servers[name].call()
                paced[name].append((time.perf_counter() - t) * 1000)
    for s in servers.values():
        s.close()
    out = {name: round(statistics.median(ts), 3) for name, ts in times.items()}
    out.update({f"{name}, paced 30 ms": round(statistics.median(ts), 3) for name, ts in paced.items()})
    return out


async def back_to_back_sdk(binary: str, rounds: int) -> dict:
    from contextlib import AsyncExitStack

    from mcp import Client, StdioServerParameters

    async with AsyncExitStack() as stack:
        clients = {}
        for name, sandbox in MODES.items():
            d = config_file(sandbox)
            params = StdioServerParameters(command=binary, args=["--config", str(d / "cfg.json"), "--data-dir", str(d),
                                                                 "--log-level", "error", "serve"])
            clients[name] = await stack.enter_async_context(Client(params))
        times: dict[str, list[float]] = {name: [] for name in clients}
        for c in clients.values():
            for _ in range(5):
                await c.call_tool(CALL["name"], CALL["arguments"])
        await asyncio.sleep(1)
        for _ in range(max(1, rounds // BLOCK)):
            for name, c in clients.items():
                for _ in range(BLOCK):
                    t = time.perf_counter()
                    answer = await c.call_tool(CALL["name"], CALL["arguments"])
                    times[name].append((time.perf_counter() - t) * 1000)
                    if answer.is_error:
                        raise RuntimeError(answer.structured_content)
        out = {name: round(statistics.median(ts), 3) for name, ts in times.items()}
        sustained = []
        client = clients["zygote, default pool"]
        for _ in range(300):
            t = time.perf_counter()
            await client.call_tool(CALL["name"], CALL["arguments"])
            sustained.append((time.perf_counter() - t) * 1000)
        out["zygote, default pool, 300 in a row"] = round(statistics.median(sustained), 3)
        # Blocks of 10 back to back with 100 ms between them: a client that runs a few calls, then thinks.
        blocks = []
        for _ in range(30):
            await asyncio.sleep(0.1)
            for _ in range(10):
                t = time.perf_counter()
                await client.call_tool(CALL["name"], CALL["arguments"])
                blocks.append((time.perf_counter() - t) * 1000)
        out["spread"] = {
            "zygote, default pool, blocks of 25 taking turns": spread(times["zygote, default pool"]),
            "zygote, default pool, 300 in a row": spread(sustained),
            "zygote, default pool, blocks of 10": spread(blocks),
        }
        return out


def spread(ms: list[float]) -> dict:
    """p50, p90 and p99 of call times (ms): a burst's tail is where an empty pool shows."""
    ordered = sorted(ms)
    at = lambda q: round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)  # noqa: E731
    return {"p50": at(0.5), "p90": at(0.9), "p99": at(0.99), "calls": len(ordered)}


def python_start(rounds: int) -> float:
    ts = []
    for _ in range(rounds):
        t = time.perf_counter()
        subprocess.run(["/usr/bin/python3", "-I", "-S", "-c", "pass"], check=True)
        ts.append((time.perf_counter() - t) * 1000)
    return round(statistics.median(ts), 3)


def http_throughput(binary: str, seconds: float) -> dict:
    out: dict[str, list[float]] = {"zygote": [], "cold": []}
    for _ in range(2):
        for name, zygote in (("zygote", True), ("cold", False)):
            d = Path(tempfile.mkdtemp(prefix="cem-fresh-http-"))
            proc, port = start_node(binary, d, None, "node", sandbox={"zygote": zygote})
            time.sleep(2)
            try:
                out[name].append(round(throughput(port, 20, seconds, CALL["name"], CALL["arguments"]), 1))
            finally:
                proc.terminate()
                proc.wait(timeout=30)
    return {**out, "zygote_over_cold": round(statistics.median(out["zygote"]) / statistics.median(out["cold"]), 2)}


class CpuGroup:
    """A cgroup that counts the CPU time of every process ever in it: the server and, as they are its
    descendants, every sandbox and the zygote (v1 cpuacct, or v2 cpu.stat). Root only."""

    def __init__(self):
        name = f"cem-bench-{os.getpid()}-{time.monotonic_ns()}"
        v1 = Path("/sys/fs/cgroup/cpuacct")
        if v1.is_dir():
            self.dir, self.v2 = v1 / name, False
        else:
            base = Path("/sys/fs/cgroup") / open("/proc/self/cgroup").read().split("0::", 1)[1].strip().lstrip("/")
            self.dir, self.v2 = base / name, True
        self.dir.mkdir()

    def usage_s(self) -> float:
        if self.v2:
            for line in (self.dir / "cpu.stat").read_text().splitlines():
                if line.startswith("usage_usec"):
                    return int(line.split()[1]) / 1e6
        return int((self.dir / "cpuacct.usage").read_text()) / 1e9

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` started inside the group (before it can fork anything)."""
        return ["/bin/sh", "-c", f'echo $$ > {self.dir}/cgroup.procs && exec "$@"', "sh", *argv]

    def remove(self) -> None:
        for _ in range(100):
            try:
                self.dir.rmdir()
                return
            except OSError:
                time.sleep(0.1)


def cpu_per_execution(binary: str, executions: int = 300) -> dict:
    """CPU milliseconds per session-less execution (server, zygote and sandboxes; not the client),
    counted over `executions` back-to-back calls once the server is warm."""
    out = {}
    for name, zygote in (("zygote", True), ("cold", False)):
        group = CpuGroup()
        d = config_file({"zygote": zygote})
        argv = group.wrap([binary, "--config", str(d / "cfg.json"), "--data-dir", str(d), "--log-level", "error", "serve"])
        s = Lines.__new__(Lines)
        s.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        s.ids = iter(range(1, 1 << 30))
        s.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                 "clientInfo": {"name": "bench", "version": "1"}})
        for _ in range(20):
            s.call()
        time.sleep(2)
        before = group.usage_s()
        for _ in range(executions):
            s.call()
        time.sleep(2)  # the last interpreters' ends and the pool's refills belong to these executions
        after = group.usage_s()
        s.close()
        group.remove()
        out[name] = round((after - before) / executions * 1000, 2)
    out["zygote_over_cold"] = round(out["zygote"] / out["cold"], 3)
    return out


def main() -> None:
    binary = sys.argv[1]
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 200
    seconds = float(sys.argv[sys.argv.index("--seconds") + 1]) if "--seconds" in sys.argv else 8.0
    python = python_start(100)
    lines = back_to_back_lines(binary, rounds)
    sdk = asyncio.run(back_to_back_sdk(binary, rounds))
    python_after = python_start(100)
    yardstick = statistics.median([python, python_after])
    report = {
        "machine": {"cores": os.cpu_count(), "kernel": os.uname().release},
        "python_I_S_pass_p50_ms": {"before": python, "after": python_after},
        "back_to_back_p50_ms": {
            "sdk_client": sdk,
            "json_lines": lines,
            "sdk_zygote_pool_over_python": round(sdk["zygote, default pool"] / yardstick, 3),
            "lines_zygote_pool_over_python": round(lines["zygote, default pool"] / yardstick, 3),
            "sdk_zygote_pool_over_cold_pool": round(sdk["zygote, default pool"] / sdk["cold, default pool"], 3),
            "sdk_zygote_300_in_a_row_over_python": round(sdk["zygote, default pool, 300 in a row"] / yardstick, 3),
        },
        "burst_spread_ms": sdk.pop("spread"),
        "http_20_clients_executions_per_s": http_throughput(binary, seconds),
        "cpu_ms_per_execution": cpu_per_execution(binary),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
