"""Throughput of one, two and three nodes sharing one PostgreSQL store behind HAProxy, and what relaying a
session call to the node that holds it adds.

    /usr/bin/python3 bench/bench_cluster.py target/release/code-execution-mcp [--seconds 8] [--clients 8]

Everything runs on this machine: PostgreSQL and HAProxy from Debian's packages (started as the integration tests
start them, tests/integration/cluster.py), the nodes, and the clients (threads with one keep-alive connection
each, sending stateless 2026-07-28 requests through the balancer). Prints one JSON object.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
from cluster import Balancer, Postgres, free_port  # noqa: E402

TOKEN = "bench-cluster-token-0123456789"
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}}


def start_node(binary: str, tmp: Path, pg: Postgres | None, name: str,
               sandbox: dict | None = None) -> tuple[subprocess.Popen, int]:
    """A node on the shared store (pg), or with its data directory alone (None); `sandbox` adds settings."""
    data = tmp / name
    data.mkdir()
    port = free_port()
    config = tmp / f"{name}.json"
    config.write_text(json.dumps({**({"store": {"url": pg.url}} if pg else {}),
                                  "auth": {"tokens": {"bench": TOKEN}}, "sandbox": {"max_concurrent": 16, **(sandbox or {})}}))
    log = open(tmp / f"{name}.log", "wb")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODE_EXECUTION_MCP_")}
    proc = subprocess.Popen([binary, "--data-dir", str(data), "--config", str(config), "serve", "--http",
                             f"127.0.0.1:{port}", "--node-url", f"http://127.0.0.1:{port}"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if re.search(r"listening on", (tmp / f"{name}.log").read_text(errors="replace")):
            return proc, port
        if proc.poll() is not None:
            raise RuntimeError((tmp / f"{name}.log").read_text())
        time.sleep(0.05)
    raise RuntimeError(f"{name} did not start")


class Conn:
    """One keep-alive connection sending stateless tool calls."""

    def __init__(self, port: int):
        self.c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def call(self, tool: str, args: dict) -> dict:
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                           "params": {"name": tool, "arguments": args, "_meta": META}})
        self.c.request("POST", "/mcp", body, {
            "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
            "Authorization": f"Bearer {TOKEN}", "MCP-Protocol-Version": "2026-07-28",
            "Mcp-Method": "tools/call", "Mcp-Name": tool})
        r = self.c.getresponse()
        text = r.read().decode()
        if r.status != 200:
            raise RuntimeError(f"{r.status}: {text}")
        if text.startswith("{"):
            message = json.loads(text)
        else:
            message = [json.loads(l[5:]) for l in text.splitlines() if l.startswith("data:") and l[5:].strip()][-1]
        result = message["result"]
        if result.get("isError"):
            raise RuntimeError(result["content"][0]["text"][:300])
        return result


def throughput(port: int, clients: int, seconds: float, tool: str, args: dict) -> float:
    """Calls per second of `clients` threads calling `tool` through `port` for `seconds`."""
    done = [0] * clients
    errors: list[str] = []
    stop = time.monotonic() + seconds

    def worker(i: int):
        conn = Conn(port)
        try:
            conn.call(tool, args)  # warm the connection, not counted
            while time.monotonic() < stop:
                conn.call(tool, args)
                done[i] += 1
        except Exception as e:  # reported, not hidden
            errors.append(str(e))

    start = time.monotonic()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} clients failed: {errors[0]}")
    return sum(done) / (time.monotonic() - start)


def main() -> None:
    binary = sys.argv[1]
    seconds = float(sys.argv[sys.argv.index("--seconds") + 1]) if "--seconds" in sys.argv else 8.0
    clients = int(sys.argv[sys.argv.index("--clients") + 1]) if "--clients" in sys.argv else 8
    out: dict = {"clients": clients, "seconds": seconds, "cores": os.cpu_count(), "nodes": {}}
    tmp = Path(tempfile.mkdtemp(prefix="cem-bench-cluster-"))
    pg = Postgres.start(tmp)
    try:
        # 0: one node without a store (the data directory alone), the yardstick.
        for n in (0, 1, 2, 3):
            run = tmp / f"run{n}"
            run.mkdir()
            nodes = [start_node(binary, run, pg if n else None, f"node{i + 1}") for i in range(max(n, 1))]
            lb = Balancer.start(run, [port for _, port in nodes])
            try:
                Conn(lb.port).call("write_workspace_file", {"filename": "data.txt", "content": "x" * 1000})
                time.sleep(2)  # warm pools fill
                execs = throughput(lb.port, clients, seconds, "execute_code", {"code": "result = sum(range(1000))"})
                reads = throughput(lb.port, clients, seconds, "read_workspace_file", {"filename": "data.txt"})
                figures = {"executions_per_s": round(execs, 1), "tool_calls_per_s": round(reads, 1)}
                if n == 0:
                    out["no_store"] = figures
                else:
                    out["nodes"][n] = figures
                print(f"{n or 'no store, 1'} node(s): {execs:.1f} executions/s, {reads:.1f} tool calls/s", file=sys.stderr)
                if n == 2:
                    out["relay"] = relay_latency(nodes)
            finally:
                lb.stop()
                for proc, _ in nodes:
                    proc.terminate()
                for proc, _ in nodes:
                    proc.wait(timeout=20)
    finally:
        pg.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    one = out["nodes"][1]
    one["executions_ratio_to_no_store"] = round(one["executions_per_s"] / out["no_store"]["executions_per_s"], 2)
    one["tool_calls_ratio_to_no_store"] = round(one["tool_calls_per_s"] / out["no_store"]["tool_calls_per_s"], 2)
    for n in (2, 3):
        out["nodes"][n]["executions_ratio_to_1"] = round(out["nodes"][n]["executions_per_s"] / one["executions_per_s"], 2)
        out["nodes"][n]["tool_calls_ratio_to_1"] = round(out["nodes"][n]["tool_calls_per_s"] / one["tool_calls_per_s"], 2)
    print(json.dumps(out, indent=2))


def relay_latency(nodes: list[tuple[subprocess.Popen, int]], rounds: int = 200) -> dict:
    """Median round trip of a session call sent to the node holding the session, and sent to the other node
    (which relays it), alternating so both see the same conditions."""
    holder, other = Conn(nodes[0][1]), Conn(nodes[1][1])
    holder.call("execute_code", {"code": "n = 0", "session_id": "bench"})
    direct, relayed = [], []
    for _ in range(rounds):
        for conn, sink in ((holder, direct), (other, relayed)):
            t = time.perf_counter()
            conn.call("execute_code", {"code": "n += 1\nresult = n", "session_id": "bench"})
            sink.append((time.perf_counter() - t) * 1000)
    d, r = statistics.median(direct), statistics.median(relayed)
    return {"rounds": rounds, "direct_p50_ms": round(d, 2), "relayed_p50_ms": round(r, 2),
            "added_p50_ms": round(r - d, 2), "ratio": round(r / d, 2)}


if __name__ == "__main__":
    main()
