"""One tenant's code cannot hurt another: host work done for an execution is bounded by it.

Real binary over HTTP with static per-person tokens (one tenant each), the fault-injection server of
tests/integration/servers as the upstream, and hostile code that does what an attacker would: loops over
huge tool results, floods the bridge with requests that are not tool calls, without reading the answers.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import threading
import time
from pathlib import Path

import httpx2 as httpx
import pytest

from cluster import free_port
from conftest import SDK1_PYTHON, start_http
from stateless import Stateless, proc_status

FAULT = str(Path(__file__).parent / "servers" / "fault_server.py")
TOKENS = {"alice": "alice-token-0123456789abcdef", "bob": "bob-token-0123456789abcdef"}


def serve(tmp_path: Path, extra: dict | None = None, *args: str):
    """A server with the fault upstream and Alice's and Bob's tokens (`args`: more of `serve`'s flags)."""
    data = tmp_path / "data"
    data.mkdir()
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "mcpServers": {"fault": {"command": str(SDK1_PYTHON), "args": [FAULT]}},
        "auth": {"tokens": TOKENS},
        **(extra or {}),
    }))
    server = start_http(data, *args, config=config)
    return server, Stateless(server.url, TOKENS["alice"]), Stateless(server.url, TOKENS["bob"])


@contextlib.contextmanager
def serving(tmp_path: Path, extra: dict | None = None):
    """serve(), stopped when the block ends (however it ends)."""
    server, alice, bob = serve(tmp_path, extra)
    try:
        yield server, alice, bob
    finally:
        server.stop()


@pytest.fixture
def hosted(tmp_path: Path):
    with serving(tmp_path) as served:
        yield served


def test_big_results_are_counted_as_they_arrive_and_none_outlives_the_deadline(tmp_path: Path):
    # What is measured is the accounting of results. In pii.mode auto each result is also tokenized before
    # the code sees it (detection runs at about 20 MB/s), which would leave the loop one or two calls in 6 s:
    # manual mode keeps the loop fast, and no cpu limit slows it (both are measured elsewhere).
    with serving(tmp_path, {"pii": {"mode": "manual"}, "sandbox": {"tenant_cpu_percent": 100}}) as (server, alice, _):
        check_big_results(server, alice)


def check_big_results(server, alice):
    # Warm the upstream and the tenant first: what follows measures the execution alone.
    assert alice.call("execute_code", {"code": "result = call_tool('fault.ok', {})"})["success"]
    before = proc_status(server.proc.pid)["VmRSS"]
    code = "n = 0\nwhile True:\n    call_tool('fault.big_text', {'mib': 15})\n    n += 1\n"
    started = time.monotonic()
    answer = alice.call("execute_code", {"code": code, "timeout_seconds": 6})
    took = time.monotonic() - started
    assert not answer["success"] and "TimeoutError" in answer["error"], answer
    # More than one result, so more than one was counted as it arrived (a loaded machine fits two or three
    # 15 MB results in 6 s of a debug build).
    assert answer["tool_calls"] >= 2, answer
    # Every result was counted (or estimated) before the answer, none after it: the answer is not held
    # up by accounting (the build that kept every result and tokenized them afterwards answered 15 to
    # 20 s late).
    assert answer["tokens"]["tool_results"] > answer["tool_calls"] * 100_000, answer["tokens"]
    assert took < 6 + 10, f"the answer came {took - 6:.1f} s after the deadline"
    # No result is kept: the server's memory is back near where it was (15 MB results, many of them).
    after = proc_status(server.proc.pid)["VmRSS"]
    assert after - before < 200_000, f"RSS grew by {(after - before) // 1024} MB"


def test_a_bridge_flood_is_bounded_and_another_tenant_is_served(hosted):
    server, alice, bob = hosted
    assert alice.call("execute_code", {"code": "result = 1"})["success"]
    # Bob's code writes tokenize requests of 1 MB straight to the bridge, never reading an answer.
    flood = """
send = call_tool.__globals__['_send']
text = 'mail ana@example.com now ' * 40000
for i in range(100000):
    send({"type": "pii", "id": 1000000 + i, "arguments": {"op": "tokenize", "text": text}})
"""
    threads_seen: list[int] = []
    bob_answer: dict = {}
    bob_took: list[float] = []

    def run_flood():
        t0 = time.monotonic()
        bob_answer.update(bob.call("execute_code", {"code": flood, "timeout_seconds": 5}))
        bob_took.append(time.monotonic() - t0)

    flooder = threading.Thread(target=run_flood)
    flooder.start()
    alice_took: list[float] = []
    while flooder.is_alive():
        threads_seen.append(proc_status(server.proc.pid)["Threads"])
        t0 = time.monotonic()
        ok = alice.call("execute_code", {"code": "result = 6 * 7"})
        alice_took.append(time.monotonic() - t0)
        assert ok["success"] and ok["result"] == 42, ok
        threads_seen.append(proc_status(server.proc.pid)["Threads"])
        w = alice.call("write_workspace_file", {"filename": "note.txt", "content": "still here"})
        assert w["success"], w
    flooder.join()
    assert not bob_answer["success"] and "TimeoutError" in bob_answer["error"], bob_answer
    # The code waited (the host stopped reading from it); the host did not queue its requests.
    assert bob_took[0] < 5 + 10, f"the flood's answer came {bob_took[0] - 5:.1f} s after its deadline"
    assert max(threads_seen) < 64, f"the server ran {max(threads_seen)} threads"
    assert alice_took and max(alice_took) < 10, alice_took


def test_requests_to_the_host_are_counted_and_capped_per_execution(tmp_path: Path):
    with serving(tmp_path, {"sandbox": {"max_host_requests": 5}}) as (server, alice, _):
        code = """
errors = []
for i in range(6):
    try:
        search_tools('sleep', limit=1)
    except ToolError as e:
        errors.append(str(e))
result = errors
"""
        answer = alice.call("execute_code", {"code": code})
        assert answer["success"], answer
        [refusal] = answer["result"]
        assert "sandbox.max_host_requests" in refusal and "more than 5" in refusal, refusal
        # A request over the size bound is refused with the bound; the next one works.
        big = """
try:
    tokenize_pii('x' * (3 << 20))
    error = None
except ToolError as e:
    error = str(e)
result = {"error": error, "after": tokenize_pii('mail ana@example.com')[0]}
"""
        answer = alice.call("execute_code", {"code": big})
        assert answer["success"], answer
        assert "at most" in answer["result"]["error"], answer
        assert answer["result"]["after"] == "mail [EMAIL_1]", answer


def test_a_sessions_threads_do_not_run_between_its_calls(hosted):
    server, alice, _ = hosted
    start = """
import threading, time, os
def beat():
    while True:
        with open('beat.txt', 'a') as f:
            f.write('x')
        time.sleep(0.02)
threading.Thread(target=beat, daemon=True).start()
time.sleep(0.3)
result = os.path.getsize('beat.txt')
"""
    first = alice.call("execute_code", {"code": start, "session_id": "s"})
    assert first["success"] and first["result"] > 0, first
    beat = server.log.parent / "data" / "tenants"
    [path] = list(beat.glob("*/workspace/beat.txt"))
    time.sleep(0.3)  # the last write of the call lands
    settled = path.stat().st_size
    time.sleep(1.5)
    assert path.stat().st_size == settled, "the session's thread ran between calls"
    # The next call resumes it: the thread writes again while the call runs.
    again = alice.call("execute_code", {"code": "import os, time\nn = os.path.getsize('beat.txt')\ntime.sleep(0.5)\n"
                                                 "result = os.path.getsize('beat.txt') - n", "session_id": "s"})
    assert again["success"] and again["result"] > 0, again


def server_cpu_group(server) -> Path:
    """The server's v1 cpu cgroup directory; skips the test on a host without the cgroup v1 cpu controller."""
    group = cpu_group(server.proc.pid)
    if group is None or not (group / "cpu.shares").exists():
        pytest.skip("no cgroup v1 cpu controller here")
    return group


def cpu_group(pid: int) -> Path | None:
    """The v1 cpu cgroup directory of a process, where the host has one."""
    return cpu_group_of(Path(f"/proc/{pid}"))


def test_a_tenants_running_sandboxes_share_one_cpu_group_of_equal_weight(tmp_path: Path):
    # No bandwidth limit here: with one, both spinning tenants would run into it and weigh less for a while
    # (the next test), and which of them gets its weight back first depends on when each one's spin ends.
    with serving(tmp_path, {"sandbox": {"tenant_cpu_percent": 100}}) as (server, alice, bob):
        group = server_cpu_group(server)
        tenants = group / "code-execution-mcp" / "tenants"
        seen: dict[str, list[int]] = {}

        def spin(who: Stateless, name: str):
            # Four processes busy at once: together they weigh what one tenant weighs.
            code = ("import multiprocessing, time\n"
                    "def burn():\n    t = time.monotonic()\n    while time.monotonic() - t < 3: pass\n"
                    "ps = [multiprocessing.Process(target=burn) for _ in range(4)]\n"
                    "[p.start() for p in ps]\n[p.join() for p in ps]\nresult = 'spun'")
            seen[name] = [who.call("execute_code", {"code": code})]

        threads = [threading.Thread(target=spin, args=(t, n)) for t, n in ((alice, "alice"), (bob, "bob"))]
        for t in threads:
            t.start()
        # Looked at while the spinners run, as often as it takes: a loaded machine starts one tenant's sandbox
        # later than the other's, and a single look at a fixed moment could come before it.
        members: dict[str, list[str]] = {"alice": [], "bob": []}
        while any(t.is_alive() for t in threads):
            for n in members:
                procs = tenants / f"token-{n}" / "cgroup.procs"
                # The server itself is listed in each too: its threads that work for a tenant sit in its group.
                now = [p for p in procs.read_text().split() if p != str(server.proc.pid)] if procs.exists() else []
                if len(now) > len(members[n]):
                    members[n] = now
            time.sleep(0.05)
        shares = {n: (tenants / f"token-{n}" / "cpu.shares").read_text().strip() for n in ("alice", "bob")}
        for t in threads:
            t.join()
        assert set(seen) == {"alice", "bob"}, seen
        assert all(seen[n][0]["success"] for n in seen), seen
        assert len(members["alice"]) >= 5 and len(members["bob"]) >= 5, members
        assert not set(members["alice"]) & set(members["bob"]), members
        assert shares == {"alice": "1024", "bob": "1024"}, shares


def test_a_tenant_at_its_cpu_limit_weighs_less_than_a_quiet_one_until_it_stops(tmp_path: Path):
    # A bandwidth limit caps how much a busy tenant takes, not how long the others wait for a core: at equal
    # weight a group of spinning threads kept a quiet tenant's woken thread waiting tens of ms at a time.
    # No pool: refilling it after bob's call is work in bob's group that counts against his limit, and bob
    # must be quiet here.
    with serving(tmp_path, {"sandbox": {"pool_size": 0}}) as (server, alice, bob):
        group = server_cpu_group(server)
        assert bob.call("execute_code", {"code": "result = 1"})["success"]
        tenants = group / "code-execution-mcp" / "tenants"
        shares = {n: tenants / f"token-{n}" / "cpu.shares" for n in ("alice", "bob")}
        # A tenant's first call starts its zygote, which counts against its limit and may run into it: bob
        # settles first (no new throttled period for longer than the server waits before it gives the weight
        # back, and his weight back; a look right after the call could come before the server's own).
        stat = tenants / "token-bob" / "cpu.stat"
        give_up = time.monotonic() + 30
        last, since = None, time.monotonic()
        while time.monotonic() < give_up:
            now = stat.read_text().split("nr_throttled ")[1].split()[0]
            if now != last:
                last, since = now, time.monotonic()
            if time.monotonic() - since > 1.5 and shares["bob"].read_text().strip() == "1024":
                break
            time.sleep(0.1)
        assert shares["bob"].read_text().strip() == "1024"
        # One busy process per core for 4 s: four times the default limit (25% of all cores) on any machine.
        busy = max(4, os.cpu_count() or 1)
        code = ("import multiprocessing, time\n"
                "def burn():\n    t = time.monotonic()\n    while time.monotonic() - t < 4: pass\n"
                f"ps = [multiprocessing.Process(target=burn) for _ in range({busy})]\n"
                "[p.start() for p in ps]\n[p.join() for p in ps]\nresult = 'spun'")
        answer: dict = {}
        spinner = threading.Thread(target=lambda: answer.update(alice.call("execute_code", {"code": code})))
        spinner.start()
        seen = {"alice": set(), "bob": set()}
        while spinner.is_alive():
            for n in seen:
                seen[n].add(shares[n].read_text().strip())
            time.sleep(0.05)
        spinner.join()
        assert answer.get("success"), answer
        assert "16" in seen["alice"], seen
        assert seen["bob"] == {"1024"}, seen
        # Once it has stopped for a while, the same weight as everyone again.
        deadline = time.monotonic() + 15
        while shares["alice"].read_text().strip() != "1024" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert shares["alice"].read_text().strip() == "1024"


def test_each_tenant_prepares_its_sandboxes_apart_and_cgroup_moves_wait_for_no_grace_period(hosted):
    # One preparation thread for the whole server, in one low-weight group, was starved by any tenant's busy
    # processes and queued every pool behind a fork bomb's clean-up. And every move between cgroups waited for
    # an RCU grace period under the kernel's cgroup mutex, which a fork bomb stretched to seconds.
    server, alice, bob = hosted
    group = server_cpu_group(server)
    for who in (alice, bob):
        assert who.call("execute_code", {"code": "result = 1"})["result"] == 1
    tasks = Path(f"/proc/{server.proc.pid}/task")
    deadline = time.monotonic() + 10
    while True:
        preparing = {}
        for task in tasks.iterdir():
            try:
                if (task / "comm").read_text().strip() == "cem-prepare":
                    preparing[task.name] = cpu_group_of(task)
            except OSError:
                continue
        groups = sorted(str(g.relative_to(group)) for g in preparing.values() if g is not None)
        wanted = [f"code-execution-mcp/tenants/token-{n}/background" for n in ("alice", "bob")]
        if set(wanted) <= set(groups) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    # One thread per tenant (the local one warms its pool too), each in its own tenant's background group.
    assert set(wanted) <= set(groups) and len(groups) == len(set(groups)), preparing
    assert all(g.startswith("code-execution-mcp/tenants/") for g in groups), preparing
    with open("/proc/self/mounts") as f:
        favoring = [line for line in f if line.split()[2] in ("cgroup", "cgroup2") and "favordynmods" in line.split()[3]]
    assert favoring, "no cgroup mount has favordynmods"


def thread_cpu(task: Path) -> float:
    """CPU seconds a thread used (user and system), 0 for one gone meanwhile."""
    try:
        fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_cpu_by_group(pid: int, group: Path) -> dict[str, float]:
    """The server's own threads' CPU seconds, summed by their cpu group relative to `group`."""
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            where = cpu_group_of(task)
        except OSError:
            continue
        key = str(where.relative_to(group)) if where is not None and where.is_relative_to(group) else "?"
        out[key] = out.get(key, 0.0) + thread_cpu(task)
    return out


def test_what_the_host_does_for_a_tenants_call_runs_on_its_own_workers_in_its_cpu_group(tmp_path: Path):
    # The server's async workers decoded every tenant's upstream messages and serialised its results for
    # the sandbox: a tenant pulling 15 MB results in a loop held them (at the server's cpu weight, outside any
    # tenant's group), and every other tenant's requests queued behind it.
    with serving(tmp_path, {"pii": {"mode": "manual"}, "sandbox": {"tenant_cpu_percent": 100}}) as (server, alice, bob):
        group = server_cpu_group(server)
        for who in (alice, bob):
            assert who.call("execute_code", {"code": "result = call_tool('fault.ok', {})"})["success"]
        # Each tenant has its own workers, named by its digest (never its id), in its own cpu group.
        lanes: dict[str, set[str]] = {}
        for task in Path(f"/proc/{server.proc.pid}/task").iterdir():
            name = (task / "comm").read_text().strip()
            if name.startswith("tenant-"):
                lanes.setdefault(name, set()).add(str(cpu_group_of(task).relative_to(group)))
        assert not any("alice" in n or "bob" in n for n in lanes), lanes
        assert sorted(g for groups in lanes.values() for g in groups) == [
            "code-execution-mcp/tenants/token-alice", "code-execution-mcp/tenants/token-bob"], lanes
        # While alice's code pulls 15 MB results, what the server spends on them is spent in alice's group.
        before = server_cpu_by_group(server.proc.pid, group)
        code = "n = 0\nwhile True:\n    call_tool('fault.big_text', {'mib': 15})\n    n += 1\n"
        answer = alice.call("execute_code", {"code": code, "timeout_seconds": 6})
        assert answer["tool_calls"] >= 2, answer
        after = server_cpu_by_group(server.proc.pid, group)
        spent = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
        in_alice = sum(v for k, v in spent.items() if k.startswith("code-execution-mcp/tenants/token-alice"))
        elsewhere = sum(v for k, v in spent.items() if not k.startswith("code-execution-mcp/tenants/token-alice"))
        # Decoding, copying and serialising 30 MB or more is at least tens of milliseconds; the server's own
        # workers only carried the request and its answer.
        assert in_alice > 2 * elsewhere, spent
        # And bob is served meanwhile by his own workers, as before.
        assert bob.call("execute_code", {"code": "result = 2"})["result"] == 2


def test_each_tenant_may_use_at_most_its_share_of_the_hosts_cpu(tmp_path: Path):
    # Equal cpu.shares did not hold: ten Python threads of one sandbox handing their interpreter lock to each
    # other kept the other tenants' groups waiting for a core for up to seconds. Each tenant's group now has a
    # bandwidth limit (sandbox.tenant_cpu_percent of all cores); the local tenant has none.
    # Half a core whatever the host has, so that code busy in two threads is past it.
    percent = max(1, 50 // (os.cpu_count() or 1))
    with serving(tmp_path, {"sandbox": {"tenant_cpu_percent": percent}}) as (server, alice, bob):
        group = server_cpu_group(server)
        for who in (alice, bob):
            assert who.call("execute_code", {"code": "result = 1"})["result"] == 1
        tenants = group / "code-execution-mcp" / "tenants"
        cores = os.cpu_count() or 1
        for name in ("alice", "bob"):
            period = int((tenants / f"token-{name}" / "cpu.cfs_period_us").read_text())
            quota = int((tenants / f"token-{name}" / "cpu.cfs_quota_us").read_text())
            assert quota == max(1000, period * cores * percent // 100), (name, period, quota)
        assert int((tenants / "local" / "cpu.cfs_quota_us").read_text()) == -1
        # Code that spins in two threads is held to the limit: its group is throttled, and still answers.
        code = ("import threading, time\ndef spin():\n    t = time.monotonic()\n    while time.monotonic() - t < 1.5: pass\n"
                "ts = [threading.Thread(target=spin) for _ in range(2)]\n[t.start() for t in ts]\n[t.join() for t in ts]\n"
                "result = 'spun'")
        assert alice.call("execute_code", {"code": code})["result"] == "spun"
        stat = dict(line.split() for line in (tenants / "token-alice" / "cpu.stat").read_text().splitlines())
        assert int(stat["nr_throttled"]) > 0, stat


def cpu_group_of(task: Path) -> Path | None:
    """The v1 cpu cgroup directory of a process or thread given by its /proc directory, where the host has one."""
    for line in (task / "cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return Path("/sys/fs/cgroup/cpu") / path.lstrip("/")
    return None


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (from /proc's parent links)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        children = [p for p, pp in parents.items() if pp == parent]
        found += children
        frontier += children
    return found


def test_an_idle_tenant_gives_its_sandboxes_back_and_comes_back_warm(tmp_path: Path):
    data = tmp_path / "data"
    data.mkdir()
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"auth": {"tokens": TOKENS}, "sandbox": {"tenant_idle_seconds": 2}}))
    server = start_http(data, config=config)
    alice = Stateless(server.url, TOKENS["alice"])
    try:
        assert alice.call("execute_code", {"code": "x = 1", "session_id": "s"})["success"]
        assert alice.call("execute_code", {"code": "result = 1"})["success"]
        time.sleep(0.5)
        warm = len(descendants(server.proc.pid))
        assert warm >= 3, f"a warm pool, a zygote and a session: {warm} processes"
        deadline = time.monotonic() + 30
        while descendants(server.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert descendants(server.proc.pid) == [], "idle tenants kept their processes"
        # The next request starts them again; the session says its interpreter ended.
        again = alice.call("execute_code", {"code": "result = 2"})
        assert again["success"] and again["result"] == 2, again
        session = alice.call("execute_code", {"code": "result = 'x' in globals()", "session_id": "s"})
        assert session["success"] and session["result"] is False, session
        assert "idle" in session.get("note", ""), session
        time.sleep(1)
        assert len(descendants(server.proc.pid)) >= 2, "the pool is warm again"
    finally:
        server.stop()


def test_each_tenant_calls_its_own_upstream_process_and_an_idle_one_stops_it(tmp_path: Path):
    # One process per stdio server for everyone made one tenant's 15 MB results hold the others' calls on the
    # same pipe, and its cancellations crash the server under the others' calls ("Transport closed").
    with serving(tmp_path, {"sandbox": {"tenant_idle_seconds": 3}}) as (server, alice, bob):
        def upstream_pid(who: Stateless) -> int:
            answer = who.call("execute_code", {"code": "result = call_tool('fault.ok', {})"})
            assert answer["success"], answer
            return int(json.dumps(answer["result"]).split("ok from ")[1].split('"')[0].split("\\")[0])

        a, b = upstream_pid(alice), upstream_pid(bob)
        assert a != b
        crashed = alice.call("execute_code", {"code": "result = call_tool('fault.crash', {})"})
        assert not crashed["success"], crashed
        assert upstream_pid(bob) == b  # bob's process and calls are untouched
        again = upstream_pid(alice)
        assert again not in (a, b)  # alice's restarted for her
        # Idle past sandbox.tenant_idle_seconds: their processes stop, and come back on the next call.
        deadline = time.monotonic() + 30
        while Path(f"/proc/{again}").exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not Path(f"/proc/{again}").exists(), "an idle tenant's upstream process still runs"
        assert upstream_pid(alice) not in (a, b, again)


def test_an_idle_tenant_gives_its_search_catalog_back_and_ranks_the_same_after(tmp_path: Path):
    # Every principal that ever searched held its own catalog (entries, word index, vectors: megabytes with
    # thousands of tools) and what its searches made of its records, for as long as the server ran.
    port = free_port()
    server, alice, bob = serve(tmp_path, {"sandbox": {"tenant_idle_seconds": 3}}, "--metrics", f"127.0.0.1:{port}")

    def catalogs() -> int:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        return int(float(re.search(r"^cem_search_catalogs (\S+)$", text, re.M).group(1)))

    def names(who: Stateless) -> list[str]:
        found = who.call("search_tools", {"query": "check the server is alive", "detail_level": "name"})
        return found["tools"]

    def released(tenant: str, what: str) -> bool:
        digest = hashlib.sha256(tenant.encode()).hexdigest()[:12]
        return any(digest in line and what in line for line in server.log.read_text().splitlines())

    try:
        before = names(alice)
        assert "fault.ok" not in before, before
        # The tool she wanted, used after the search: learnt.
        assert alice.call("execute_code", {"code": "result = call_tool('fault.ok', {})"})["success"]
        ranked = names(alice)
        assert "fault.ok" in ranked, ranked
        names(bob)
        held = catalogs()
        # Bob keeps searching; Alice idles past sandbox.tenant_idle_seconds (the idle loop releases her catalog,
        # then her records' state: both lines are waited for).
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (
                released("token-alice", "its search catalog released")
                and released("token-alice", "what its searches made of its records released")):
            names(bob)
            time.sleep(0.3)
        assert released("token-alice", "its search catalog released"), server.log.read_text()[-3000:]
        assert released("token-alice", "what its searches made of its records released")
        assert not released("token-bob", "its search catalog released"), "a tenant that searches keeps it"
        assert catalogs() == held - 1
        # Her next search builds them again and ranks as before, with what she taught it.
        assert names(alice) == ranked
        assert catalogs() == held
    finally:
        server.stop()
