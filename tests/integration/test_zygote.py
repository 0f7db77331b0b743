"""Fresh sandboxes forked from a zygote: each child is as isolated from its siblings and from earlier
executions as a cold sandbox, the cold path still works and says so, and interpreter sessions are capped
with least-recently-used eviction."""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client

from conftest import BIN, run_cli, stdio_params

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


def params_with(data_dir: Path, tmp_path: Path, **sandbox):
    config = tmp_path / "cfg.json"
    config.write_text(json.dumps({"sandbox": sandbox}))
    params = stdio_params(data_dir)
    params.args = ["--config", str(config), *params.args]
    return params


async def run(client: Client, code: str, **extra) -> dict:
    answer = await client.call_tool("execute_code", {"code": code, **extra})
    body = answer.structured_content
    assert body["success"] == (not answer.is_error), body
    return body


async def sandbox_stats(client: Client) -> dict:
    return (await client.call_tool("get_execution_stats", {})).structured_content["sandbox"]


# Searches the child's own memory for a + b without ever holding a + b itself: a hit of `a` is only counted
# when `b` follows it, so the needle exists in memory only if something left it there.
SCAN_MEMORY = """
import re
hits = 0
with open('/proc/self/maps') as f:
    regions = [l.split() for l in f]
with open('/proc/self/mem', 'rb', buffering=0) as mem:
    for r in regions:
        if len(r) < 2 or not r[1].startswith('rw'):
            continue
        lo, hi = (int(x, 16) for x in r[0].split('-'))
        pos = lo
        while pos < hi:
            size = min(1 << 20, hi - pos)
            try:
                mem.seek(pos)
                chunk = mem.read(size + len(a) + len(b))
            except OSError:
                break
            i = chunk.find(a)
            while i != -1:
                if chunk[i + len(a):i + len(a) + len(b)] == b:
                    hits += 1
                i = chunk.find(a, i + 1)
            pos += size
"""


async def test_fresh_sandboxes_are_forked_from_a_zygote(data_dir: Path):
    async with Client(stdio_params(data_dir)) as client:
        body = await run(client, "import os\nresult = os.getpid()")
        # Pid 1 of its own pid namespace: forked, not started by the cold launcher (whose program is pid 2).
        assert body["result"] == 1
        assert (await sandbox_stats(client))["fresh_sandbox"]["path"] == "zygote"
        # A forked child costs about 1 MB waiting: by default the pool keeps four, and fills up to them.
        with anyio.fail_after(20):
            while (stats := await sandbox_stats(client))["pool_ready"] < 4:
                await anyio.sleep(0.1)
        assert stats["pool_target"] == 4 and stats["pool_ready"] == 4, stats


async def test_a_child_runs_with_every_layer_of_a_cold_sandbox(data_dir: Path):
    code = ("status = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines())\n"
            "import os\nresult = {k: status[k].strip() for k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb',"
            " 'NoNewPrivs', 'Seccomp')}\nresult['filters'] = int(status['Seccomp_filters'])\n"
            "result['uid'] = os.getuid()\nresult['mounts'] = open('/proc/self/mounts').read()")
    async with Client(stdio_params(data_dir)) as client:
        r = (await run(client, code))["result"]
    zero = "0000000000000000"
    assert [r[k] for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")] == [zero] * 5, r
    assert r["NoNewPrivs"] == "1" and r["Seccomp"] == "2"
    # The zygote's (three on x86_64, with the x32 guard; two elsewhere), and the one that makes them the cold policy.
    assert r["filters"] >= (4 if __import__("platform").machine() == "x86_64" else 3), r
    assert r["uid"] != 0
    mounts = [line.split() for line in r["mounts"].splitlines()]
    # Its own /proc and private /tmp and /dev/shm are the last mounts on those paths: they cover the zygote's.
    last = {m[1]: m for m in mounts}
    assert last["/proc"][2] == "proc" and last["/tmp"][2] == "tmpfs" and last["/dev/shm"][2] == "tmpfs"
    assert "ro" in last["/"][3].split(",") and "ro" in last["/proc/sys"][3].split(",")


async def test_a_child_keeps_nothing_of_an_earlier_execution(data_dir: Path):
    a, b = secrets.token_hex(8).encode(), secrets.token_hex(8).encode()
    async with Client(stdio_params(data_dir)) as client:
        leave = ("import builtins, json, os, socket\nkept = (a + b) * 1000\nbuiltins.cem_left = kept\njson.cem_left = kept\n"
                 "open('/tmp/left', 'wb').write(kept)\nopen('/dev/shm/left', 'wb').write(kept)\n"
                 # An abstract unix socket, open when the sandbox is killed, and another that outlives every
                 # process: sent over a socket pair inside a cycle of descriptors, in flight until the kernel's
                 # collector runs. The network namespace may go to a later child, which must find it empty.
                 "builtins.cem_sock = socket.socket(socket.AF_UNIX)\nbuiltins.cem_sock.bind(b'\\0' + a)\n"
                 "builtins.cem_sock.listen()\nlost = socket.socket(socket.AF_UNIX)\nlost.bind(b'\\0' + a + b'-lost')\n"
                 "x, y = socket.socketpair()\nsocket.send_fds(x, [b'.'], [lost.fileno(), y.fileno()])\n"
                 "socket.send_fds(y, [b'.'], [x.fileno()])\nlost.close(); x.close(); y.close()\n"
                 "result = [len(kept), os.readlink('/proc/self/ns/net')]")
        ctx = {"a": a.decode(), "b": b.decode()}
        first = await run(client, "a, b = a.encode(), b.encode()\n" + leave, context_vars=ctx)
        assert first["result"][0] == 32000
        namespaces = [first["result"][1]]
        # The pool's interpreters, then freshly forked ones, until one runs in a network namespace an ended
        # execution had: a namespace goes back to the zygote's free list only once its child is reaped, and
        # a refill forked while the earlier children still run gets a new one, so how many executions that
        # takes depends on how fast the host reaps (all seven of a loaded run's first seven were new).
        for i in range(24):
            check = ("a, b = a.encode(), b.encode()\n" + SCAN_MEMORY +
                     "import builtins, json, os, socket\nresult = {'hits': hits, 'builtins': hasattr(builtins, 'cem_left'),"
                     " 'json': hasattr(json, 'cem_left'), 'tmp': os.listdir('/tmp'), 'shm': os.listdir('/dev/shm'),"
                     " 'listed': a.decode() in open('/proc/net/unix').read()}\n"
                     # The first execution's name is free; each execution leaves a socket of its own too.
                     "free = socket.socket(socket.AF_UNIX)\nfree.bind(b'\\0' + a)\nfree.close()\n"
                     f"builtins.cem_sock = socket.socket(socket.AF_UNIX)\nbuiltins.cem_sock.bind(b'\\0' + a + b'{i}')\n"
                     "result['net'] = os.readlink('/proc/self/ns/net')")
            body = await run(client, check, context_vars=ctx)
            namespaces.append(body["result"].pop("net"))
            assert body["result"] == {"hits": 0, "builtins": False, "json": False, "tmp": [], "shm": [],
                                      "listed": False}
            if i >= 5 and len(set(namespaces)) < len(namespaces):
                break
        # Namespaces were reused, so ended executions' were checked (two live children never share one: see below).
        assert len(set(namespaces)) < len(namespaces), namespaces
        # The scan does find what its own execution holds (the test can fail).
        body = await run(client, "a, b = a.encode(), b.encode()\nheld = (a + b) * 3\n" + SCAN_MEMORY + "result = hits",
                         context_vars=ctx)
        assert body["result"] >= 3


SIBLING = """
import ctypes, errno, os, signal, socket
libc = ctypes.CDLL(None, use_errno=True)
def err(rc):
    return ctypes.get_errno() if rc == -1 else 0
seen = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
killed = []
for pid in range(2, 4096):
    try:
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)
    except ProcessLookupError:
        pass
try:
    os.kill(-1, signal.SIGKILL)  # every process this one may signal (pid 1, itself, is spared)
    broadcast = 'sent'
except ProcessLookupError:
    broadcast = 'nobody'
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(b'\\0' + name.encode())
    reached = 'connected'
except OSError as e:
    reached = errno.errorcode[e.errno]
PTRACE_ATTACH, PTRACE_TRACEME = 16, 0
result = {
    'pids': seen, 'killed': killed, 'broadcast': broadcast, 'socket': reached, 'tmp': os.listdir('/tmp'),
    'ptrace_me': err(libc.ptrace(PTRACE_TRACEME, 0, None, None)),
    'ptrace_parent': err(libc.ptrace(PTRACE_ATTACH, os.getppid(), None, None)),
    'shm': [l.split()[1] for l in open('/proc/sysvipc/shm').read().splitlines()[1:]],
    'listed': name in open('/proc/net/unix').read(),
}
"""


async def test_a_child_cannot_see_signal_trace_or_reach_a_sibling(data_dir: Path):
    name = "cem-sibling-" + secrets.token_hex(4)
    async with Client(stdio_params(data_dir)) as client:
        hold = (
            "import ctypes, socket\nlistener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
            "listener.bind(b'\\0' + name.encode())\nlistener.listen()\n"
            "open('/tmp/mine', 'w').write('x')\nlibc = ctypes.CDLL(None)\n"
            "shm_id = libc.shmget(0x5eed, 4096, 0o1666)\nsecret = 41\nresult = shm_id >= 0")
        assert (await run(client, hold, session_id="sibling", context_vars={"name": name}))["result"] is True
        body = await run(client, SIBLING, context_vars={"name": name})
        r = body["result"]
        assert r["pids"] == [1], r  # its own pid namespace: nothing else to see in /proc
        assert r["killed"] == [] and r["broadcast"] == "nobody", r
        # Abstract sockets are scoped by Landlock (or a network namespace per child) to the child.
        assert r["socket"] in ("EPERM", "ECONNREFUSED"), r
        assert r["tmp"] == []
        assert r["ptrace_me"] == 1 and r["ptrace_parent"] == 1, r  # EPERM: seccomp
        assert r["shm"] == [], r  # its own IPC namespace: the sibling's System V segment is not there
        assert r["listed"] is False, r  # its own network namespace: the sibling's socket is not even listed
        # The sibling survived all of it, with its state.
        alive = await run(client, "import os\nsecret += 1\nresult = [secret, os.listdir('/tmp'), listener.fileno() > 0]",
                          session_id="sibling")
        assert alive["result"] == [42, ["mine"], True]


async def test_limits_are_each_childs_own(data_dir: Path):
    async with Client(stdio_params(data_dir)) as client:
        small = await client.call_tool("execute_code", {"code": "x = bytearray(300 << 20)", "memory_mb": 64})
        assert small.is_error and "MemoryError" in small.structured_content["error"]
        # The next child of the same zygote has the default limit again.
        body = await run(client, "x = bytearray(300 << 20)\nresult = len(x)")
        assert body["result"] == 300 << 20
        # Its own pids cgroup: a process limit that is not shared with other children.
        fork = ("import os\nn = 0\ntry:\n    while True:\n        pid = os.fork()\n        if pid == 0:\n"
                "            import time; time.sleep(3); os._exit(0)\n        n += 1\nexcept OSError:\n    pass\nresult = n")
        counts = []
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                async def one():
                    counts.append((await run(client, fork))["result"])
                tg.start_soon(one)
                tg.start_soon(one)
        assert counts and all(100 <= c < 128 for c in counts), counts


async def test_a_killed_zygote_is_replaced(data_dir: Path):
    async with Client(stdio_params(data_dir)) as client:
        assert (await run(client, "result = 1"))["result"] == 1
        zygotes = subprocess.run(["pgrep", "-f", f"{data_dir}.*cem_zygote.py|cem_zygote.py"], capture_output=True,
                                 text=True).stdout.split()
        assert zygotes
        subprocess.run(["kill", "-9", *zygotes])
        await anyio.sleep(0.5)  # the pooled children die with their zygote (the kill is not instant)
        for _ in range(5):
            body = await run(client, "import os\nresult = os.getpid()")
            assert body["result"] in (1, 2), body
        assert (await run(client, "import os\nresult = os.getpid()"))["result"] == 1
        assert (await sandbox_stats(client))["fresh_sandbox"]["path"] == "zygote"


async def test_the_cold_path_runs_when_asked_and_says_why(data_dir: Path, tmp_path: Path):
    async with Client(params_with(data_dir, tmp_path, zygote=False)) as client:
        body = await run(client, "import os\nresult = [os.getpid(), sorted(os.listdir('/tmp'))]")
        assert body["result"] == [2, []]
        stats = await sandbox_stats(client)
        assert stats["fresh_sandbox"] == {"path": "cold", "reason": "sandbox.zygote is false"}
        assert stats["pool_target"] == 2  # a whole interpreter each: fewer kept by default


def test_doctor_says_how_fresh_sandboxes_start(data_dir: Path, tmp_path: Path):
    out = run_cli("--data-dir", str(data_dir), "doctor", timeout=120)
    line = next(l for l in out.stdout.splitlines() if "fresh sandbox" in l)
    assert "ok" in line and "forked from a zygote" in line and "prepared at background cpu priority" in line, out.stdout
    config = tmp_path / "cold.json"
    config.write_text(json.dumps({"sandbox": {"zygote": False}}))
    out = run_cli("--config", str(config), "--data-dir", str(data_dir), "doctor", timeout=120)
    line = next(l for l in out.stdout.splitlines() if "fresh sandbox" in l)
    assert "cold" in line and "sandbox.zygote is false" in line, out.stdout


async def test_sessions_past_the_cap_evict_the_least_recently_used(data_dir: Path, tmp_path: Path):
    async with Client(params_with(data_dir, tmp_path, max_sessions=2)) as client:
        await run(client, "v = 'a'\nblob = bytearray(40 << 20)", session_id="a")
        await run(client, "v = 'b'", session_id="b")
        await run(client, "result = v", session_id="a")  # a is now the most recently used
        listed = {s["session_id"]: s for s in (await sandbox_stats(client))["session_list"]}
        assert set(listed) == {"a", "b"}
        # The memory each idle session holds: a keeps 40 MB more than b.
        assert listed["a"]["memory_mb"] - listed["b"]["memory_mb"] > 35, listed
        await run(client, "v = 'c'", session_id="c")  # evicts b, the least recently used
        answer = await client.call_tool("execute_code", {"code": "result = v", "session_id": "b"})
        assert answer.is_error
        error = answer.structured_content["error"]
        assert "'b' was ended to make room" in error and "sandbox.max_sessions = 2" in error, error
        # Told once: the next call starts the session afresh.
        body = await run(client, "result = 'v' in globals()", session_id="b")
        assert body["result"] is False
        # b's return evicted a (c was used later); c is still there.
        assert (await run(client, "result = v", session_id="c"))["result"] == "c"
        assert (await sandbox_stats(client))["sessions"] == 2


async def test_a_busy_session_is_not_evicted(data_dir: Path, tmp_path: Path):
    async with Client(params_with(data_dir, tmp_path, max_sessions=1)) as client:
        async with anyio.create_task_group() as tg:
            async def busy():
                await run(client, "import time\ntime.sleep(3)\nresult = 'done'", session_id="busy")
            tg.start_soon(busy)
            await anyio.sleep(1)
            answer = await client.call_tool("execute_code", {"code": "result = 1", "session_id": "other"})
            assert answer.is_error
            assert "all are running code" in answer.structured_content["error"]
            assert "sandbox.max_sessions = 1" in answer.structured_content["error"]


async def test_idle_sessions_end_with_a_note(data_dir: Path, tmp_path: Path):
    async with Client(params_with(data_dir, tmp_path, session_idle_seconds=1)) as client:
        await run(client, "kept = 1", session_id="idle")
        await anyio.sleep(3.5)
        body = await run(client, "result = 'kept' in globals()", session_id="idle")
        assert body["result"] is False
        assert "idle for over 1 s" in body["note"]


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


async def test_the_zygote_holds_no_secret(data_dir: Path, tmp_path: Path):
    if __import__("os").geteuid() != 0:
        pytest.skip("reading another uid's /proc/<pid>/environ and mem needs root")
    secret = "cem-secret-" + secrets.token_hex(12)
    config = tmp_path / "cfg.json"
    config.write_text(json.dumps({"mcpServers": {"vault": {"command": "/bin/false", "env": {"TOKEN": secret},
                                                           "disabled": True}}}))
    params = stdio_params(data_dir)
    params.args = ["--config", str(config), *params.args]
    params.env = {**__import__("os").environ, "CEM_TEST_SECRET": secret}
    async with Client(params) as client:
        assert (await run(client, "result = 1"))["result"] == 1
        servers = [int(p) for p in subprocess.run(["pgrep", "-f", f"data-dir {data_dir}"], capture_output=True,
                                                 text=True).stdout.split()]
        zygotes = [p for s in servers for p in descendants(s)
                   if Path(f"/proc/{p}/comm").exists() and Path(f"/proc/{p}/comm").read_text().strip() == "cem-zygote"]
        assert zygotes, servers
        for z in zygotes:
            assert secret.encode() not in Path(f"/proc/{z}/environ").read_bytes()
            assert secret.encode() not in Path(f"/proc/{z}/cmdline").read_bytes()
            # Its whole memory: the zygote is a fresh process image (launcher re-exec, then Python), never a
            # fork of the server that holds the config.
            found = {secret.encode(): False, b"cem_runtime": False}
            with open(f"/proc/{z}/maps") as maps, open(f"/proc/{z}/mem", "rb", buffering=0) as mem:
                for line in maps:
                    lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                    if "r" not in line.split()[1]:
                        continue
                    try:
                        mem.seek(lo)
                        chunk = mem.read(hi - lo)
                    except OSError:
                        continue
                    for needle in found:
                        found[needle] |= needle in chunk
            # The scan sees the zygote's own state (so it can fail), and no secret.
            assert found == {secret.encode(): False, b"cem_runtime": True}


def cpu_cgroup(pid: int | str) -> str | None:
    """The path of a process's cgroup in the v1 hierarchy with the cpu controller."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return path
    return None


def named(pids: list[int], comm: str) -> list[int]:
    out = []
    for p in pids:
        try:
            if Path(f"/proc/{p}/comm").read_text().strip() == comm:
                out.append(p)
        except OSError:
            pass
    return out


async def test_the_next_sandbox_is_prepared_at_background_cpu_priority(data_dir: Path):
    own = cpu_cgroup(__import__("os").getpid())
    if __import__("os").geteuid() != 0 or own is None or not Path("/sys/fs/cgroup/cpu/cpu.shares").exists():
        pytest.skip("needs root and the cgroup v1 cpu controller")
    # The host's own preparation thread in the server's background group; each tenant's sandboxes in its own
    # group (equal weight), with the tenant's zygote in that group's background group.
    background = own.rstrip("/") + "/code-execution-mcp/background"
    tenant = own.rstrip("/") + "/code-execution-mcp/tenants/local"
    tenant_background = tenant + "/background"
    async with Client(stdio_params(data_dir)) as client:
        assert (await run(client, "result = 1", session_id="held"))["result"] == 1
        servers = [int(p) for p in subprocess.run(["pgrep", "-f", f"data-dir {data_dir}"], capture_output=True,
                                                 text=True).stdout.split()]
        deadline = time.monotonic() + 10
        while True:
            tree = [p for s in servers for p in descendants(s)]
            zygotes, children = named(tree, "cem-zygote"), named(tree, "cem-sandbox")
            places = [cpu_cgroup(p) for p in children]
            # The zygote, and so every child it forks, in the tenant's background group; a child that is set up
            # (the session's, the pool's four) waits in the tenant's own, so an execution that takes it runs at once.
            if zygotes and places == [tenant] * 5:
                break
            assert time.monotonic() < deadline, (zygotes, places, own)
            await anyio.sleep(0.1)
        assert {cpu_cgroup(z) for z in zygotes} == {tenant_background}
        # The server's thread that prepares this tenant's next sandbox is in the tenant's background group too
        # (one per tenant: a server-wide one was starved by any busy tenant); the others are not.
        threads = {}
        for s in servers:
            for task in Path(f"/proc/{s}/task").iterdir():
                threads.setdefault((task / "comm").read_text().strip(), set()).add(cpu_cgroup(f"{s}/task/{task.name}"))
        assert threads.get("cem-prepare") == {tenant_background}, threads
        assert threads.get("tokio-rt-worker") == {own}, threads
        shares = int(Path(f"/sys/fs/cgroup/cpu{background}/cpu.shares").read_text())
        assert 2 <= shares <= 128, shares  # a small fraction of the 1024 every other process has
        assert int(Path(f"/sys/fs/cgroup/cpu{tenant_background}/cpu.shares").read_text()) == shares
        assert int(Path(f"/sys/fs/cgroup/cpu{tenant}/cpu.shares").read_text()) == 1024
        assert (await sandbox_stats(client))["fresh_sandbox"] == {
            "path": "zygote", "preparation": f"background cpu priority (cgroup v1 cpu.shares {shares})"}
