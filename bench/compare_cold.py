"""Two builds side by side on the cold path (no warm pool to hide start-up), for a change to how fresh
interpreters start:

    /usr/bin/python3 bench/compare_cold.py OLD_BINARY NEW_BINARY [--rounds 80] [--seconds 8]

1. Back-to-back session-less execute_code round trips over stdio with `sandbox.pool_size: 0`, the two servers
   alternated call by call; p50 of each, their ratio, and `python3 -I -S -c pass` as the yardstick.
2. Session-less executions per second from 20 concurrent HTTP clients (stateless requests, default pool),
   each build twice, alternated.
Prints one JSON object.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_cluster import start_node, throughput  # noqa: E402


def stdio_server(binary: str):
    d = Path(tempfile.mkdtemp(prefix="cem-cold-"))
    cfg = d / "cfg.json"
    cfg.write_text(json.dumps({"sandbox": {"pool_size": 0}}))
    proc = subprocess.Popen([binary, "--config", str(cfg), "--data-dir", str(d), "--log-level", "error", "serve"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    ids = iter(range(1, 1 << 30))

    def request(method: str, params: dict) -> dict:
        n = next(ids)
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": n, "method": method, "params": params}) + "\n")
        proc.stdin.flush()
        while True:
            message = json.loads(proc.stdout.readline())
            if message.get("id") == n:
                return message

    request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                           "clientInfo": {"name": "bench", "version": "1"}})
    proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
    proc.stdin.flush()
    return proc, request


def main() -> None:
    old, new = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 80
    seconds = float(sys.argv[sys.argv.index("--seconds") + 1]) if "--seconds" in sys.argv else 8.0
    servers = {"old": stdio_server(old), "new": stdio_server(new)}
    times: dict[str, list[float]] = {"old": [], "new": []}
    call = {"name": "execute_code", "arguments": {"code": "result = 1"}}
    for _, request in servers.values():
        for _ in range(3):
            request("tools/call", call)
    for _ in range(rounds):
        for name, (_, request) in servers.items():
            started = time.perf_counter()
            answer = request("tools/call", call)
            times[name].append((time.perf_counter() - started) * 1000)
            if "error" in answer or answer["result"].get("isError"):
                raise RuntimeError(answer)
    for proc, _ in servers.values():
        proc.stdin.close()
        proc.wait(timeout=20)
    python = []
    for _ in range(rounds):
        started = time.perf_counter()
        subprocess.run(["/usr/bin/python3", "-I", "-S", "-c", "pass"], check=True)
        python.append((time.perf_counter() - started) * 1000)
    per_second: dict[str, list[float]] = {"old": [], "new": []}
    for _ in range(2):
        for name, binary in (("old", old), ("new", new)):
            proc, port = start_node(binary, Path(tempfile.mkdtemp(prefix="cem-cold-")), None, "node")
            time.sleep(2)
            try:
                per_second[name].append(round(throughput(port, 20, seconds, "execute_code", call["arguments"]), 1))
            finally:
                proc.terminate()
                proc.wait(timeout=20)
    o, n = statistics.median(times["old"]), statistics.median(times["new"])
    print(json.dumps({
        "rounds": rounds,
        "no_pool_back_to_back_p50_ms": {"old": round(o, 2), "new": round(n, 2), "new_over_old": round(n / o, 3)},
        "python_I_S_pass_p50_ms": round(statistics.median(python), 2),
        "http_20_clients_executions_per_s": {**per_second, "new_over_old": round(
            statistics.median(per_second["new"]) / statistics.median(per_second["old"]), 2)},
    }, indent=2))


if __name__ == "__main__":
    main()
