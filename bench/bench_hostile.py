"""Ten tenants on one server, two of them hostile: does the hostile code hurt the others?

    /usr/bin/python3 bench/bench_hostile.py target/release/code-execution-mcp [--minutes 10] [--baseline-minutes 3]

One server over HTTP with ten static tokens (one tenant each) and the fault-injection upstream of the integration
tests (its `big_text` returns megabytes). Two phases, one run:

1. baseline: the eight ordinary tenants alone for --baseline-minutes (after --warm-up-seconds of the same
   traffic, not counted: a server's first minute is slower than its steady state);
2. hostile: the same eight, plus two hostile tenants for --minutes, each running two attack loops at once:
   15 MB tool results in a loop, a flood of 1 MB PII requests written straight to the bridge without reading the
   answers, a fork bomb, a CPU bomb of 16 processes, filling the disk, and idle sessions whose threads spin.
   CEM_SOAK_ATTACKS=a,b runs only those; `thread_bomb` (ten spinning Python threads in one execution) runs
   only when named there: it is the attack the server does not withstand yet (BENCHMARKS.md), kept out of the
   default cycle so that the cycle's figures stay comparable from one run to the next.

An ordinary tenant sends one request at a time (half a second apart): small computations, a tool call from
code, workspace writes and reads, search_tools, tokenize_pii from code. Its latency and errors are recorded per
phase. The server's RSS is sampled every second, from its start to 30 s after the hostile phase. Prints one
JSON object: p50/p99 of the ordinary tenants in each phase and their ratio, errors, RSS at start, peak, final,
how many attacks ran and how they ended, and the ordinary p99 over the requests that ran beside each attack.

3. slow connections (--slow-minutes, 0 for none): the same eight beside --slow-connections (2,000) slowloris
   sockets from 127.0.0.2 (a request line, then a header byte every three seconds, reopened when the server
   closes one), in a process of its own; reported apart as `slow_connections`: the tenants' p50/p99 and p99
   against the baseline's, errors, the peak RSS, and what the attacker opened and the server closed.

4. hostile upstreams (--upstream-minutes, 0 for none): the same eight while three upstreams of the config
   (tests/integration/servers/hostile_server.py) attack, turned on by a file for the phase only: `storm`
   announces tools/list_changed ten times a second, each listing different; `endless` pages its tool list
   for ever (2,000 tools a page) and announces a change every second; and the two hostile tenants call
   `loud.shout` in a loop (20 MB of stderr a call, on their own processes). Reported apart as
   `hostile_upstreams`: the tenants' p50/p99 and p99 against the baseline's, errors, the peak RSS, the log's
   growth, and how often each attack ran.

CEM_SOAK_TRACE=1 prints each attack's tenant, name, start and end (`time.monotonic()`, the clock every process
of this machine shares) to stderr, to line a run up with a sample of the tenants' cgroups or a kernel trace
(record that with `perf sched record -k CLOCK_MONOTONIC`: perf's own clock is another).

The attack loops run in a process of their own (each person is a different client: the ordinary tenants' answers
must not wait for the attack driver's interpreter lock before they are timed).

Everything stays on this machine (127.0.0.1); every loop is bounded by the phase's end.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FAULT = REPO / "tests" / "integration" / "servers" / "fault_server.py"
SDK1 = Path(os.environ.get("CEM_SDK1_PYTHON", REPO / ".test-env" / "sdk1" / "bin" / "python"))
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "soak", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}}
ORDINARY = [f"user{i}" for i in range(8)]
HOSTILE = ["mallory", "trudy"]


def token(name: str) -> str:
    return f"{name}-soak-token-0123456789abcdef"


class Tenant:
    """One person's keep-alive connection sending stateless tool calls."""

    def __init__(self, port: int, name: str):
        self.port, self.name = port, name
        self.conn: http.client.HTTPConnection | None = None

    def call(self, tool: str, args: dict, timeout: float = 180) -> dict:
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                           "params": {"name": tool, "arguments": args, "_meta": META}})
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                   "Authorization": f"Bearer {token(self.name)}", "MCP-Protocol-Version": "2026-07-28",
                   "Mcp-Method": "tools/call", "Mcp-Name": tool}
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
            try:
                self.conn.request("POST", "/mcp", body, headers)
                r = self.conn.getresponse()
                text = r.read().decode()
                break
            except (ConnectionError, http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {text[:300]}")
        if r.getheader("content-type", "").startswith("text/event-stream"):
            messages = [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:") and line[5:].strip()]
            message = [m for m in messages if "id" in m][-1]
        else:
            message = json.loads(text)
        if "error" in message:
            raise RuntimeError(f"JSON-RPC error {message['error']}")
        result = message["result"]
        if "structuredContent" in result:
            return result["structuredContent"]
        content = "".join(c.get("text", "") for c in result.get("content", []))
        try:
            return json.loads(content)
        except ValueError:
            return {"success": not result.get("isError"), "text": content}


# --- what ordinary tenants do ----------------------------------------------------------------------------------

def ordinary_steps(i: int) -> list[tuple[str, dict, callable]]:
    return [
        ("execute_code", {"code": "result = sum(i * i for i in range(20000))"},
         lambda a: a.get("success") and a.get("result") == sum(i * i for i in range(20000))),
        ("execute_code", {"code": "result = call_tool('fault.ok', {})"},
         lambda a: a.get("success") and "ok from" in json.dumps(a.get("result"))),
        ("write_workspace_file", {"filename": f"notes/{i}.txt", "content": "x" * 4000},
         lambda a: a.get("success")),
        ("read_workspace_file", {"filename": f"notes/{i}.txt"},
         lambda a: a.get("success") and len(a.get("content", "")) == 4000),
        ("search_tools", {"query": "sleep for a while", "limit": 3},
         lambda a: a.get("success", True) and "fault" in json.dumps(a)),
        ("execute_code", {"code": "result = tokenize_pii('write to ana@example.com')[0]"},
         lambda a: a.get("success") and "[EMAIL_" in a.get("result", "")),
    ]


def ordinary(port: int, name: str, until: float, out: dict, phase: str, stop: threading.Event) -> None:
    t = Tenant(port, name)
    steps = ordinary_steps(ORDINARY.index(name))
    k = 0
    while time.monotonic() < until and not stop.is_set():
        tool, args, ok = steps[k % len(steps)]
        k += 1
        started = time.monotonic()
        try:
            answer = t.call(tool, args)
            good = bool(ok(answer))
            why = None if good else json.dumps(answer)[:300]
        except Exception as e:  # noqa: BLE001 - an error of any kind is counted and shown
            good, why = False, str(e)[:300]
        took = time.monotonic() - started
        if took > 1 and os.environ.get("CEM_SOAK_SLOW"):
            print(f"slow {name} {tool} {took:.2f}s exec_ms={answer.get('execution_time_ms') if good else why}",
                  file=sys.stderr)
        with LOCK:
            out.setdefault(phase, {"latencies": [], "errors": [], "by_tool": {}})
            out[phase]["latencies"].append(took)
            out[phase]["by_tool"].setdefault(tool, []).append(took)
            out[phase].setdefault("timed", []).append((started, took))
            if not good:
                out[phase]["errors"].append(f"{name} {tool}: {why}")
        time.sleep(0.5)


# --- what hostile tenants do -----------------------------------------------------------------------------------

ATTACKS = {
    "big_results": ("n = 0\nwhile True:\n    call_tool('fault.big_text', {'mib': 15})\n    n += 1\n", 10),
    "bridge_flood": ("send = call_tool.__globals__['_send']\ntext = 'mail ana@example.com now ' * 40000\n"
                     "for i in range(100000):\n    send({'type': 'pii', 'id': 1000000 + i, "
                     "'arguments': {'op': 'tokenize', 'text': text}})\n", 5),
    "fork_bomb": ("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n", 5),
    "cpu_bomb": ("import multiprocessing\ndef spin():\n    while True: pass\n"
                 "ps = [multiprocessing.Process(target=spin) for _ in range(16)]\n[p.start() for p in ps]\n"
                 "[p.join() for p in ps]\n", 8),
    "disk_fill": ("import os, glob\nfor f in glob.glob('fill-*'): os.remove(f)\nn = 0\nblock = b'x' * (8 << 20)\n"
                  "try:\n    while True:\n        with open(f'fill-{n}', 'wb') as f:\n"
                  "            for _ in range(8): f.write(block)\n        n += 1\nexcept OSError as e:\n"
                  "    result = f'stopped after {n} files: {e}'\n", 15),
    # Not in the default cycle: the threads of idle_session without a session (no freezing between calls).
    "thread_bomb": ("import threading\ndef spin():\n    while True: pass\n"
                    "ts = [threading.Thread(target=spin, daemon=True) for _ in range(10)]\n[t.start() for t in ts]\n"
                    "[t.join() for t in ts]\n", 8),
    "idle_session": ("import threading\ndef spin():\n    while True: pass\n"
                     "threading.Thread(target=spin, daemon=True).start()\nresult = 'left spinning'\n", 5),
}


# Attacks run only when CEM_SOAK_ATTACKS names them.
OPTIONAL = {"thread_bomb"}


def hostile(port: int, name: str, until: float, out: dict, lane: int, stop: threading.Event) -> None:
    t = Tenant(port, name)
    # CEM_SOAK_ATTACKS=a,b runs only those (to find which one hurts).
    chosen = os.environ.get("CEM_SOAK_ATTACKS")
    names = [a for a in ATTACKS if (a in chosen.split(",") if chosen else a not in OPTIONAL)]
    k = lane
    while time.monotonic() < until and not stop.is_set():
        attack = names[k % len(names)]
        k += 1
        code, timeout = ATTACKS[attack]
        args = {"code": code, "timeout_seconds": timeout}
        if attack == "idle_session":
            args["session_id"] = f"idle{k % 4}"
        started = time.monotonic()
        try:
            answer = t.call("execute_code", args)
            outcome = "ok" if answer.get("success") else (answer.get("error") or answer.get("text") or "")[:60]
        except Exception as e:  # noqa: BLE001
            outcome = f"request failed: {str(e)[:60]}"
        ended = time.monotonic()
        if os.environ.get("CEM_SOAK_TRACE", "0") not in ("", "0"):
            # One write per line: four attack threads print at once.
            sys.stderr.write(f"attack {name} {attack} {started:.3f} {ended:.3f}\n")
            sys.stderr.flush()
        with LOCK:
            out.setdefault("attack_spans", []).append((attack, started, ended))
            out.setdefault("attacks", {}).setdefault(attack, {}).setdefault(outcome.split(":")[0], 0)
            out["attacks"][attack][outcome.split(":")[0]] += 1


def attack_driver(port: int, until: float, pipe) -> None:
    """The two hostile tenants' four attack loops (in a process of their own); sends back what they recorded."""
    out: dict = {}
    stop = threading.Event()
    threads = [threading.Thread(target=hostile, args=(port, n, until, out, lane, stop))
               for n in HOSTILE for lane in (0, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pipe.send({k: out[k] for k in ("attacks", "attack_spans") if k in out})


# A fork of this process: time.monotonic() is the same clock in both, so the spans line up with the requests.
ATTACKER = multiprocessing.get_context("fork")
ATTACK_PIPE = ATTACKER.Pipe(duplex=False)


# --- a slow-connection attacker --------------------------------------------------------------------------------

SLOW_SOURCE = "127.0.0.2"  # another loopback address: the ordinary tenants connect from 127.0.0.1


def slow_connections(port: int, until: float, count: int, pipe) -> None:
    """Slowloris from SLOW_SOURCE (in a process of its own, like the attack driver): `count` connections, each
    sending a request line and then a header byte every three seconds, never finishing; one the server closes
    is opened again, at most 500 a second. Sends back how many were opened, how many the server closed, and the
    most held at once."""
    import resource
    import selectors
    import socket

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, count + 1024) if hard != resource.RLIM_INFINITY else count + 1024
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    sel = selectors.DefaultSelector()
    # socket: [whether its request line went out, when it was opened]
    socks: dict[socket.socket, list] = {}
    # most_held: the most open for over 2 s at once (what the server kept rather than refused at once).
    stats = {"connections": count, "opened": 0, "closed_by_server": 0, "open_failures": 0, "most_held": 0}
    next_drip, allowance, last = 0.0, 0.0, time.monotonic()
    while time.monotonic() < until:
        # At most 500 opened a second, however fast the server closes them: slow connections, not a flood.
        now = time.monotonic()
        allowance, last = min(500.0, allowance + (now - last) * 500), now
        while allowance >= 1 and len(socks) < count:
            allowance -= 1
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            try:
                s.bind((SLOW_SOURCE, 0))
                s.connect_ex(("127.0.0.1", port))
            except OSError:
                s.close()
                stats["open_failures"] += 1
                break
            socks[s] = [False, time.monotonic()]
            sel.register(s, selectors.EVENT_READ)
            stats["opened"] += 1
        for key, _ in sel.select(timeout=0.1):
            s = key.fileobj
            try:
                data = s.recv(4096)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                sel.unregister(s)
                s.close()
                del socks[s]
                stats["closed_by_server"] += 1
        if time.monotonic() >= next_drip:
            now = time.monotonic()
            next_drip = now + 3
            stats["most_held"] = max(stats["most_held"], sum(now - at > 2 for _, at in socks.values()))
            for s, state in socks.items():
                try:
                    s.send(b"a" if state[0] else b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                    state[0] = True
                except OSError:
                    pass
    for s in socks:
        s.close()
    pipe.send(stats)


SLOW_PIPE = multiprocessing.get_context("fork").Pipe(duplex=False)


HOSTILE_SERVER = REPO / "tests" / "integration" / "servers" / "hostile_server.py"


def hostile_upstreams(trigger: Path) -> dict:
    """The hostile upstreams of the config, each quiet until `trigger` exists."""
    def server(**env) -> dict:
        return {"command": "/usr/bin/python3", "args": [str(HOSTILE_SERVER)],
                "env": {"HOSTILE_TRIGGER_FILE": str(trigger), **{k: str(v) for k, v in env.items()}}}
    return {
        "storm": server(HOSTILE_LIST_CHANGED_HZ=10, HOSTILE_CHANGING=1),
        "endless": server(HOSTILE_PAGES="endless", HOSTILE_PAGE_SIZE=2000, HOSTILE_DESCRIPTION_BYTES=400,
                          HOSTILE_LIST_CHANGED_HZ=1),
        # No trigger: its file would be a fixed path, which one tenant's process holds and the other's is refused.
        "loud": {"command": "/usr/bin/python3", "args": [str(HOSTILE_SERVER)]},
    }


def shouter(port: int, name: str, until: float, counts: dict) -> None:
    """A hostile tenant making an upstream write 20 MB of stderr a call, in a loop."""
    t = Tenant(port, name)
    code = "for _ in range(5):\n    call_tool('loud.shout', {'bytes': 4000000})\n"
    while time.monotonic() < until:
        try:
            answer = t.call("execute_code", {"code": code, "timeout_seconds": 30})
            outcome = "ok" if answer.get("success") else (answer.get("error") or answer.get("text") or "")[:60]
        except Exception as e:  # noqa: BLE001
            outcome = f"request failed: {str(e)[:60]}"
        with LOCK:
            counts[outcome] = counts.get(outcome, 0) + 1


def upstream_phase(port: int, minutes: float, trigger: Path, out: dict, stop: threading.Event) -> dict:
    """The eight ordinary tenants for `minutes` while the hostile upstreams attack; what the attackers did."""
    until = time.monotonic() + minutes * 60
    trigger.write_text("on")
    counts: dict = {}
    threads = [threading.Thread(target=ordinary, args=(port, n, until, out, "upstream", stop)) for n in ORDINARY]
    threads += [threading.Thread(target=shouter, args=(port, n, until, counts)) for n in HOSTILE]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    trigger.unlink()
    return {"shout_calls": counts}


def slow_phase(port: int, minutes: float, count: int, out: dict, stop: threading.Event) -> dict:
    """The eight ordinary tenants for `minutes` while `count` slow connections are held against the server:
    what the attacker could hold, and the tenants' latency in `out["slow"]`."""
    until = time.monotonic() + minutes * 60
    attacker = ATTACKER.Process(target=slow_connections, args=(port, until, count, SLOW_PIPE[1]), daemon=True)
    attacker.start()
    # The attack reaches its size first (500 connections a second at most).
    time.sleep(min(count / 500 + 1, minutes * 30))
    threads = [threading.Thread(target=ordinary, args=(port, n, until, out, "slow", stop)) for n in ORDINARY]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stats = SLOW_PIPE[0].recv() if SLOW_PIPE[0].poll(max(1.0, until + 60 - time.monotonic())) else {}
    attacker.join(timeout=10)
    if attacker.is_alive():
        attacker.kill()
    return stats


# --- the server -----------------------------------------------------------------------------------------------

LOCK = threading.Lock()


def unmount_under(path: Path) -> None:
    """Undoes the workspace mounts a server run as root leaves (they outlive it on purpose), and the write-rate
    rules of their loop devices (which would hold whatever uses those devices next)."""
    with open("/proc/self/mountinfo") as f:
        table = [line.split() for line in f]
    points = [fields[4] for fields in table]
    rules = Path("/sys/fs/cgroup/blkio/blkio.throttle.write_bps_device")
    for fields in table:
        if fields[4].startswith(str(path)) and fields[4].endswith(".workspace-fs") and rules.exists():
            device = fields[2]  # major:minor of the mounted device
            try:
                rules.write_text(f"{device} 0")
            except OSError:
                pass
    for point in sorted((p for p in points if p.startswith(str(path))), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)


def start_server(binary: str, data: Path, config: Path, log: Path, *flags: str,
                 serve: tuple[str, ...] = ()) -> tuple[subprocess.Popen, int]:
    """`serve --http 127.0.0.1:0` (with `flags` before it and `serve` after), its stderr in `log`; the process and
    its port once it listens (exits the bench if it does not start)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODE_EXECUTION_MCP_")}
    with open(log, "wb") as err:
        proc = subprocess.Popen([binary, "--data-dir", str(data), "--config", str(config), *flags,
                                 "serve", "--http", "127.0.0.1:0", *serve],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)/mcp", log.read_text(errors="replace"))
        if m:
            return proc, int(m.group(1))
        if proc.poll() is not None:
            sys.exit(log.read_text())
        time.sleep(0.05)
    proc.kill()
    sys.exit("the server did not start")


def stop_server(proc: subprocess.Popen, data: Path) -> None:
    """Stops the server (killed if it has not ended in 20 s) and undoes the mounts it left under `data`."""
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
    unmount_under(data)


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def percentile(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


def while_attacks(timed: list[tuple[float, float]], spans: list[tuple[str, float, float]]) -> dict:
    """The ordinary tenants' p99 over the requests that overlapped each attack (four attack loops run at once,
    so a request counts for every attack running during it): which attack the slow requests ran beside."""
    by_attack: dict[str, list[float]] = {}
    for start, took in timed:
        end = start + took
        for attack in {a for a, s, e in spans if s < end and e > start}:
            by_attack.setdefault(attack, []).append(took)
    return {a: {"requests": len(v), "p99_ms": round(percentile(v, 99) * 1000, 1)}
            for a, v in sorted(by_attack.items())}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--baseline-minutes", type=float, default=3)
    # Ordinary traffic before the baseline, not counted: the first minute after a start (pools filling, the
    # first forks of each zygote, cold caches) is slower than the steady state, and a baseline that includes
    # it flatters the ratio.
    parser.add_argument("--warm-up-seconds", type=float, default=30)
    # sandbox.tenant_idle_seconds for the run, and how long after the hostile phase the final RSS is read:
    # with a short idle time, after the idle tenants gave their sandboxes and upstream processes back.
    parser.add_argument("--idle-seconds", type=int, default=600)
    parser.add_argument("--after-seconds", type=float, default=30)
    # sandbox.tenant_cpu_percent for the run (the server's default when not given).
    parser.add_argument("--tenant-cpu-percent", type=int)
    # The slow-connection phase, after the hostile one: the ordinary tenants beside N slowloris connections
    # from another loopback address (0 minutes: none).
    parser.add_argument("--slow-minutes", type=float, default=2)
    parser.add_argument("--slow-connections", type=int, default=2000)
    # The hostile-upstream phase, last (0 minutes: none).
    parser.add_argument("--upstream-minutes", type=float, default=2)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="cem-soak-"))
    data = tmp / "data"
    data.mkdir()
    config = tmp / "config.json"
    trigger = tmp / "upstreams-attack"
    config.write_text(json.dumps({
        "mcpServers": {"fault": {"command": str(SDK1), "args": [str(FAULT)]},
                       **(hostile_upstreams(trigger) if args.upstream_minutes > 0 else {})},
        "auth": {"tokens": {n: token(n) for n in ORDINARY + HOSTILE}},
        "sandbox": {"max_concurrent": 12, "disk_quota_mb": 256, "tenant_idle_seconds": args.idle_seconds,
                    **({"tenant_cpu_percent": args.tenant_cpu_percent} if args.tenant_cpu_percent else {})},
        "quotas": {"concurrent_executions": 2},
    }))
    log = tmp / "server.log"
    proc, port = start_server(args.binary, data, config, log, "--log-level", "warn")
    out: dict = {}
    rss: list[tuple[float, int, str]] = []
    phase = {"name": "warm-up"}
    stop = threading.Event()
    t0 = time.monotonic()

    def sample():
        while not stop.is_set() and proc.poll() is None:
            rss.append((time.monotonic() - t0, rss_kb(proc.pid), phase["name"]))
            time.sleep(1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    # Every tenant once, so start-up (its engine, its pool) is not in either phase.
    for name in ORDINARY + HOSTILE:
        Tenant(port, name).call("execute_code", {"code": "result = call_tool('fault.ok', {})"})
    time.sleep(3)
    start_rss = rss_kb(proc.pid)
    try:
        until = time.monotonic() + args.warm_up_seconds
        threads = [threading.Thread(target=ordinary, args=(port, n, until, out, "warm-up", stop)) for n in ORDINARY]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        phase["name"] = "baseline"
        until = time.monotonic() + args.baseline_minutes * 60
        threads = [threading.Thread(target=ordinary, args=(port, n, until, out, "baseline", stop)) for n in ORDINARY]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        phase["name"] = "hostile"
        until = time.monotonic() + args.minutes * 60
        threads = [threading.Thread(target=ordinary, args=(port, n, until, out, "hostile", stop)) for n in ORDINARY]
        # The attack loops run in a process of their own: in this one they shared the ordinary tenants'
        # interpreter lock, and an ordinary answer waited for the attack driver's threads before it was timed
        # (each person is a different client; only the server is shared).
        attackers = ATTACKER.Process(target=attack_driver, args=(port, until, ATTACK_PIPE[1]), daemon=True)
        attackers.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        attacked = ATTACK_PIPE[0].recv() if ATTACK_PIPE[0].poll(max(1.0, until + 240 - time.monotonic())) else {}
        attackers.join(timeout=10)
        if attackers.is_alive():
            attackers.kill()
        out.update(attacked)
        slow_stats = None
        if args.slow_minutes > 0:
            phase["name"] = "slow"
            slow_stats = slow_phase(port, args.slow_minutes, args.slow_connections, out, stop)
        upstream_stats = None
        if args.upstream_minutes > 0:
            phase["name"] = "upstream"
            log_before = log.stat().st_size
            upstream_stats = upstream_phase(port, args.upstream_minutes, trigger, out, stop)
            upstream_stats["log_growth_mb"] = round((log.stat().st_size - log_before) / (1 << 20), 2)
        phase["name"] = "after"
        time.sleep(args.after_seconds)
        final_rss = rss_kb(proc.pid)
        alive = proc.poll() is None
    finally:
        stop.set()
        stop_server(proc, tmp)
    report: dict = {"baseline_minutes": args.baseline_minutes, "hostile_minutes": args.minutes,
                    "tenant_idle_seconds": args.idle_seconds, "final_rss_after_seconds": args.after_seconds,
                    "server_alive_after": alive}
    for name in ("baseline", "hostile"):
        lat = out.get(name, {}).get("latencies", [])
        report[name] = {
            "requests": len(lat),
            "p50_ms": round(percentile(lat, 50) * 1000, 1),
            "p99_ms": round(percentile(lat, 99) * 1000, 1),
            "max_ms": round(max(lat) * 1000, 1) if lat else None,
            "errors": len(out.get(name, {}).get("errors", [])),
            "first_errors": out.get(name, {}).get("errors", [])[:5],
            "p99_ms_by_tool": {k: round(percentile(v, 99) * 1000, 1)
                               for k, v in out.get(name, {}).get("by_tool", {}).items()},
        }
    report["p50_ratio"] = round(report["hostile"]["p50_ms"] / report["baseline"]["p50_ms"], 2)
    report["p99_ratio"] = round(report["hostile"]["p99_ms"] / report["baseline"]["p99_ms"], 2)
    report["rss_mb"] = {"start": round(start_rss / 1024, 1),
                        "peak": round(max(r for _, r, _ in rss) / 1024, 1),
                        "peak_hostile": round(max((r for _, r, p in rss if p == "hostile"), default=0) / 1024, 1),
                        "final": round(final_rss / 1024, 1)}
    report["warm_up_errors"] = out.get("warm-up", {}).get("errors", [])[:5]
    report["attacks"] = out.get("attacks", {})
    if slow_stats is not None:
        lat = out.get("slow", {}).get("latencies", [])
        report["slow_connections"] = {
            "minutes": args.slow_minutes, "attacker": slow_stats,
            "requests": len(lat),
            "p50_ms": round(percentile(lat, 50) * 1000, 1),
            "p99_ms": round(percentile(lat, 99) * 1000, 1),
            "p99_ratio": round(percentile(lat, 99) * 1000 / report["baseline"]["p99_ms"], 2),
            "errors": len(out.get("slow", {}).get("errors", [])),
            "first_errors": out.get("slow", {}).get("errors", [])[:5],
            "peak_rss_mb": round(max((r for _, r, p in rss if p == "slow"), default=0) / 1024, 1),
        }
    if upstream_stats is not None:
        lat = out.get("upstream", {}).get("latencies", [])
        report["hostile_upstreams"] = {
            "minutes": args.upstream_minutes, **upstream_stats,
            "requests": len(lat),
            "p50_ms": round(percentile(lat, 50) * 1000, 1),
            "p99_ms": round(percentile(lat, 99) * 1000, 1),
            "p99_ratio": round(percentile(lat, 99) * 1000 / report["baseline"]["p99_ms"], 2),
            "errors": len(out.get("upstream", {}).get("errors", [])),
            "first_errors": out.get("upstream", {}).get("errors", [])[:5],
            "p99_ms_by_tool": {k: round(percentile(v, 99) * 1000, 1)
                               for k, v in out.get("upstream", {}).get("by_tool", {}).items()},
            "peak_rss_mb": round(max((r for _, r, p in rss if p == "upstream"), default=0) / 1024, 1),
        }
    report["p99_ms_while"] = while_attacks(out.get("hostile", {}).get("timed", []), out.get("attack_spans", []))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
