"""The escape suite: agent code tries to get out of the sandbox, and must not.

Every attempt runs through execute_code on a real server. An attempt's code
sets `result` to "blocked: ..." when the way out was closed, or
"ESCAPED: ..." when it was not. After each attempt the same server must
still serve the next request. Nothing here writes to a real host file under
/proc/sys or /sys: opening for writing is the proof.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client

from conftest import BIN, raw_stdio_server, stdio_params

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(platform.machine() != "x86_64", reason="raw syscall numbers below are x86_64's"),
]

CANARY = "cem-canary-7f3a9"

PRELUDE = r'''
import ctypes, errno, os, socket
_libc = ctypes.CDLL(None, use_errno=True)
def sys_call(nr, *args):
    ctypes.set_errno(0)
    r = _libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    return r, ctypes.get_errno()
def verdict(blocked, what):
    global result
    result = ("blocked: " if blocked else "ESCAPED: ") + what
def denied(nr, *args, name=""):
    r, e = sys_call(nr, *args)
    verdict(r == -1 and e in (errno.EPERM, errno.EACCES, errno.ENOSYS), f"{name} -> {r} errno {e}")
def raises(fn, what):
    try:
        fn()
    except OSError as e:
        verdict(True, f"{what}: {e}")
        return
    verdict(False, what)
'''

# (id, code). Each sets result via verdict()/denied()/raises().
ATTEMPTS = [
    ("read-etc-shadow", 'raises(lambda: open("/etc/shadow").read(), "read /etc/shadow")'),
    ("list-root-home", 'raises(lambda: os.listdir("/root"), "list /root")'),
    ("list-home", 'raises(lambda: os.listdir("/home"), "list /home")'),
    ("host-passwd-is-not-visible",
     'verdict("root:" not in open("/etc/passwd").read(), "host /etc/passwd content")'),
    ("host-processes-invisible",
     'procs = [p for p in os.listdir("/proc") if p.isdigit()]\n'
     'verdict(len(procs) <= 3, f"{len(procs)} processes visible")'),
    ("host-environment-invisible",
     'def env_of(p):\n'
     '    try:\n'
     '        return open(f"/proc/{p}/environ", errors="ignore").read()\n'
     '    except OSError:\n'
     '        return ""  # unreadable leaks nothing\n'
     'blob = "".join(env_of(p) for p in os.listdir("/proc") if p.isdigit())\n'
     f'verdict("{CANARY}" not in blob and "{CANARY}" not in str(os.environ), "canary in environment")'),
    ("environment-is-minimal", 'verdict(set(os.environ) <= {"PATH", "HOME", "TMPDIR", "LANG", "PYTHONIOENCODING", "PYTHONDONTWRITEBYTECODE", "MPLBACKEND", "LC_CTYPE", "CEM_PACKAGES_ENV", "CEM_PACKAGES_LAYERS"}, str(sorted(os.environ)))'),
    ("write-usr", 'raises(lambda: open("/usr/lib/cem-escape", "w"), "write /usr/lib")'),
    ("write-etc", 'raises(lambda: open("/etc/passwd", "a"), "append /etc/passwd")'),
    ("write-root-dir", 'raises(lambda: open("/cem-escape", "w"), "write /")'),
    ("tamper-runtime", 'raises(lambda: open("/opt/cem/cem_runtime.py", "a"), "write the runtime")'),
    ("write-proc-sys", 'raises(lambda: open("/proc/sys/kernel/core_pattern", "w"), "open core_pattern for writing")'),
    ("write-sysrq", 'raises(lambda: open("/proc/sysrq-trigger", "w"), "open sysrq-trigger for writing")'),
    ("write-sys", 'raises(lambda: open("/sys/kernel/uevent_helper", "w"), "open /sys for writing")'),
    ("raw-disk", 'raises(lambda: open("/dev/sda", "rb"), "open /dev/sda")'),
    ("dev-mem", 'raises(lambda: open("/dev/mem", "rb"), "open /dev/mem")'),
    ("kmsg", 'raises(lambda: open("/dev/kmsg", "rb"), "open /dev/kmsg")'),
    ("mknod", 'raises(lambda: os.mknod("/tmp/null2", 0o600 | 0o020000, os.makedev(1, 3)), "mknod char device")'),
    ("hardlink-out", 'raises(lambda: os.link("/usr/bin/env", "envlink"), "hard link to a system file")'),
    ("setuid-root", 'raises(lambda: os.setuid(0), "setuid(0)")'),
    ("no-capabilities",
     'st = dict(l.split(":", 1) for l in open("/proc/self/status"))\n'
     'verdict(st["CapEff"].strip() == "0" * 16 and st["CapBnd"].strip() == "0" * 16 and st["NoNewPrivs"].strip() == "1" and st["Seccomp"].strip() == "2", "capabilities/no_new_privs/seccomp")'),
    ("uid-not-root", 'verdict(os.getuid() != 0 and os.geteuid() != 0 and open("/proc/self/uid_map").read().split()[1] != "0", "uid 0")'),
    ("tcp-to-host", 'raises(lambda: socket.create_connection(("127.0.0.1", tcp_port), timeout=2), "TCP to host listener")'),
    ("tcp6-to-host", 'raises(lambda: socket.create_connection(("::1", tcp_port), timeout=2), "TCP to ::1")'),
    ("udp-to-host",
     'def send():\n    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n    s.sendto(b"escape", ("127.0.0.1", udp_port))\n'
     'raises(send, "UDP to host listener")'),
    ("netlink", 'raises(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0), "netlink socket")'),
    ("packet", 'raises(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0), "packet socket")'),
    ("unix-socket-by-path",
     'def go():\n    s = socket.socket(socket.AF_UNIX)\n    s.connect(unix_path)\n'
     'raises(go, "host unix socket by path")'),
    ("abstract-unix-socket",
     'def go():\n    s = socket.socket(socket.AF_UNIX)\n    s.connect("\\0" + abstract_name)\n'
     'raises(go, "host abstract unix socket")'),
    ("signal-host-process", 'raises(lambda: os.kill(host_pid, 0), "signal a host pid")'),
    ("ptrace-traceme", "denied(101, 0, 0, 0, 0, name='ptrace(TRACEME)')"),
    ("ptrace-attach-init", "denied(101, 16, 1, 0, 0, name='ptrace(ATTACH, 1)')"),
    ("process-vm-readv", "denied(310, 1, 0, 0, 0, 0, 0, name='process_vm_readv')"),
    ("mount", "denied(165, 0, 0, 0, 0, 0, name='mount')"),
    ("umount", "denied(166, 0, 0, name='umount2')"),
    ("pivot-root", "denied(155, 0, 0, name='pivot_root')"),
    ("chroot", "denied(161, 0, name='chroot')"),
    ("unshare-user", "denied(272, 0x10000000, name='unshare(CLONE_NEWUSER)')"),
    ("unshare-net", "denied(272, 0x40000000, name='unshare(CLONE_NEWNET)')"),
    ("clone-newuser", "denied(56, 0x10000000 | 17, 0, 0, 0, 0, name='clone(CLONE_NEWUSER)')"),
    ("clone3", "denied(435, 0, 0, name='clone3')"),
    ("setns", 'fd = os.open("/proc/self/ns/net", os.O_RDONLY)\ndenied(308, fd, 0, name="setns")'),
    ("keyctl", "denied(250, 0, 0, 0, 0, 0, name='keyctl')"),
    ("add-key", "denied(248, 0, 0, 0, 0, 0, name='add_key')"),
    ("bpf", "denied(321, 0, 0, 0, name='bpf')"),
    ("io-uring", "denied(425, 8, 0, name='io_uring_setup')"),
    # Newer than the reviewed syscall table: each answers as an older kernel would.
    ("quotactl-fd", "denied(443, 0, 0, 0, 0, name='quotactl_fd')"),
    ("cachestat", "denied(451, 0, 0, 0, 0, name='cachestat')"),
    ("statmount", "denied(457, 0, 0, 0, 0, name='statmount')"),
    ("listmount", "denied(458, 0, 0, 0, 0, name='listmount')"),
    ("setxattrat", "denied(463, -100, 0, 0, 0, 0, 0, name='setxattrat')"),
    ("removexattrat", "denied(466, -100, 0, 0, 0, name='removexattrat')"),
    ("open-tree-attr", "denied(467, -100, 0, 0, 0, 0, name='open_tree_attr')"),
    ("file-getattr", "denied(468, -100, 0, 0, 0, 0, name='file_getattr')"),
    ("file-setattr", "denied(469, -100, 0, 0, 0, 0, name='file_setattr')"),
    ("perf-event-open", "denied(298, 0, 0, -1, -1, 0, name='perf_event_open')"),
    ("kexec", "denied(246, 0, 0, 0, 0, name='kexec_load')"),
    ("module-load", "denied(313, 0, 0, 0, name='finit_module')"),
    ("userfaultfd", "denied(323, 0, name='userfaultfd')"),
    ("open-by-handle", "denied(304, 0, 0, 0, name='open_by_handle_at')"),
    ("x32-abi-unshare", "denied(0x40000000 | 272, 0x10000000, name='x32 unshare(CLONE_NEWUSER)')"),
    ("x32-abi-keyctl", "denied(0x40000000 | 250, 0, 0, 0, 0, 0, name='x32 keyctl')"),
    ("socketpair-netlink", "denied(53, 16, 3, 0, 0, name='socketpair(AF_NETLINK)')"),
    ("socketpair-vsock", "denied(53, 40, 1, 0, 0, name='socketpair(AF_VSOCK)')"),
    ("modify-ldt", "denied(154, 1, 0, 0, name='modify_ldt')"),
    ("kcmp", "denied(312, 1, 1, 0, 0, 0, name='kcmp')"),
    ("uid-is-dedicated", 'verdict(os.getuid() not in (0, 65534), f"uid {os.getuid()}")'),
    ("spec-not-in-cmdline", 'verdict("workspace" not in open("/proc/1/cmdline").read(), "spec in /proc/1/cmdline")'),
    ("setuid-file-has-no-effect",
     'import shutil, stat\nshutil.copy("/usr/bin/env", "suid_env")\nos.chmod("suid_env", 0o4755)\n'
     'mnt = [l for l in open("/proc/self/mountinfo") if " /workspace " in l][0]\n'
     'verdict("nosuid" in mnt and "nodev" in mnt, mnt.strip())'),
]


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def host_listeners(tmp_path: Path):
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    tcp.settimeout(0.3)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.settimeout(0.3)
    unix_path = str(tmp_path / "host.sock")
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(unix_path)
    unix.listen(1)
    abstract_name = f"cem-test-{os.getpid()}"
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind("\0" + abstract_name)
    abstract.listen(1)
    abstract.settimeout(0.3)
    yield {
        "tcp_port": tcp.getsockname()[1],
        "udp_port": udp.getsockname()[1],
        "unix_path": unix_path,
        "abstract_name": abstract_name,
        "host_pid": os.getpid(),
    }
    # Nothing may have reached any listener.
    for listener in (tcp, abstract):
        with pytest.raises((socket.timeout, BlockingIOError)):
            listener.accept()
    with pytest.raises((socket.timeout, BlockingIOError)):
        udp.recvfrom(64)
    for s in (tcp, udp, unix, abstract):
        s.close()


def secret_env_params(data_dir: Path):
    params = stdio_params(data_dir)
    params.env = {**os.environ, "CEM_TEST_SECRET": CANARY, "API_KEY": CANARY}
    return params


async def still_serves(client: Client) -> None:
    ok = await client.call_tool("execute_code", {"code": "result = 6 * 7"})
    assert not ok.is_error and ok.structured_content["result"] == 42, ok.structured_content


@pytest.mark.parametrize("name, code", ATTEMPTS, ids=[a[0] for a in ATTEMPTS])
async def test_escape_attempt_is_blocked(data_dir: Path, host_listeners: dict, name: str, code: str):
    async with Client(secret_env_params(data_dir)) as client:
        answer = await client.call_tool(
            "execute_code", {"code": PRELUDE + "\n" + code, "context_vars": host_listeners, "timeout_seconds": 20}
        )
        s = answer.structured_content
        assert s["success"], s
        assert isinstance(s["result"], str) and s["result"].startswith("blocked"), s["result"]
        await still_serves(client)


async def test_symlinks_planted_in_the_workspace_are_not_followed_by_the_host(data_dir: Path, tmp_path: Path):
    host_secret = tmp_path / "host-secret.txt"
    host_secret.write_text(CANARY)
    async with Client(stdio_params(data_dir)) as client:
        code = (
            f"import os\nos.symlink({str(host_secret)!r}, 'to_host_secret')\n"
            "os.symlink('/etc/passwd', 'to_passwd')\nos.symlink('..', 'up')\nresult = sorted(os.listdir('.'))"
        )
        planted = await client.call_tool("execute_code", {"code": code})
        assert planted.structured_content["success"], planted.structured_content
        for name in ["to_host_secret", "to_passwd", "up/host-secret.txt"]:
            r = await client.call_tool("read_workspace_file", {"filename": name})
            assert r.is_error, (name, r.structured_content)
            assert CANARY not in r.content[0].text
        w = await client.call_tool("write_workspace_file", {"filename": "up/planted.txt", "content": "x"})
        assert w.is_error
    assert not (data_dir / "planted.txt").exists()
    assert host_secret.read_text() == CANARY


BOMBS = [
    ("fork-bomb", "import os\nwhile True:\n    os.fork()", 10, None),
    ("memory-bomb", "chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))", 30, "MemoryError"),
    ("cpu-loop", "while True:\n    pass", 2, "TimeoutError"),
    ("thread-bomb",
     "import threading, time\nthreads = []\nwhile True:\n    t = threading.Thread(target=time.sleep, args=(30,))\n    t.start()\n    threads.append(t)",
     20, None),
    ("fd-exhaustion", "fds = []\nwhile True:\n    fds.append(open('/dev/null'))", 20, "OSError: [Errno 24]"),
    ("fill-tmp", "with open('/tmp/big', 'wb') as f:\n    while True:\n        f.write(b'x' * (1 << 20))", 20, "No space left"),
    ("deep-recursion-crash",
     "import sys\nsys.setrecursionlimit(10**8)\ndef f(n):\n    return f(n + 1) + 1\nf(0)", 30, None),
    ("output-flood", "while True:\n    print('x' * 1000)", 3, "TimeoutError"),
]


@pytest.mark.parametrize("name, code, timeout, expected", BOMBS, ids=[b[0] for b in BOMBS])
async def test_resource_bombs_are_contained(data_dir: Path, name: str, code: str, timeout: int, expected: str | None):
    async with Client(stdio_params(data_dir)) as client:
        answer = await client.call_tool("execute_code", {"code": code, "timeout_seconds": timeout})
        s = answer.structured_content
        assert answer.is_error and s["success"] is False, s
        if expected:
            assert expected in s["error"], s["error"]
        # The answer stays small whatever the code printed.
        assert len(answer.content[0].text) < 60_000
        await still_serves(client)


def with_disk_quota_of_40_mb(data_dir: Path, tmp_path: Path):
    """Parameters for a server whose executions may use 40 MB of disk, held by the watchdog (the mechanism
    where the kernel cannot hold it: test_disk_quota.py covers the kernel's)."""
    config = tmp_path / "cfg.json"
    config.write_text(json.dumps({"sandbox": {"disk_quota_mb": 40, "disk_quota_mode": "watchdog"}}))
    params = stdio_params(data_dir)
    params.args = ["--config", str(config), *params.args]
    return params


async def test_filling_the_workspace_is_stopped(data_dir: Path, tmp_path: Path):
    params = with_disk_quota_of_40_mb(data_dir, tmp_path)
    async with Client(params) as client:
        code = "i = 0\nwhile True:\n    write_file(f'fill/{i}.bin', 'x' * (4 << 20))\n    i += 1"
        answer = await client.call_tool("execute_code", {"code": code, "timeout_seconds": 60})
        assert answer.is_error and "disk" in answer.structured_content["error"], answer.structured_content
        await still_serves(client)
    written = sum(f.stat().st_size for f in (data_dir / "workspace" / "fill").iterdir())
    assert written < 400 << 20, f"{written >> 20} MB written before the stop"


async def test_disk_filled_by_another_process_does_not_stop_an_execution(data_dir: Path, tmp_path: Path):
    # The watchdog sees free space fall on the workspace's file system; another process (here
    # the test, as an upstream tool that downloads a file would) must not get the code killed.
    params = with_disk_quota_of_40_mb(data_dir, tmp_path)
    other = data_dir.parent / "someone-else.bin"

    def fill():
        with open(other, "wb") as f:
            for _ in range(50):
                f.write(b"x" * (4 << 20))
                f.flush()
                os.fsync(f.fileno())

    code = "import time\nwrite_file('mine.bin', 'y' * (1 << 20))\ntime.sleep(4)\nresult = 'done'"
    async with Client(params) as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, fill)
            answer = await client.call_tool("execute_code", {"code": code, "timeout_seconds": 60})
    other.unlink()
    assert not answer.is_error and answer.structured_content["result"] == "done", answer.structured_content


async def test_filling_the_disk_through_a_deleted_file_is_stopped(data_dir: Path, tmp_path: Path):
    # A file deleted but held open is in no folder: the watchdog, which looks at what the
    # execution wrote before blaming it, must still count it.
    params = with_disk_quota_of_40_mb(data_dir, tmp_path)
    code = (
        "import os\nf = open('hidden.bin', 'wb')\nos.unlink('hidden.bin')\n"
        "for i in range(50):\n    f.write(b'x' * (4 << 20))\n    f.flush()\n    os.fsync(f.fileno())\n"
        "result = 'wrote 200 MB'"
    )
    async with Client(params) as client:
        answer = await client.call_tool("execute_code", {"code": code, "timeout_seconds": 60})
        assert answer.is_error and "disk" in answer.structured_content["error"], answer.structured_content
        await still_serves(client)


async def test_an_inode_flood_is_stopped(data_dir: Path):
    async with Client(stdio_params(data_dir)) as client:
        code = "os = __import__('os')\nos.makedirs('many', exist_ok=True)\ni = 0\nwhile True:\n    open(f'many/{i}', 'w').close()\n    i += 1"
        answer = await client.call_tool("execute_code", {"code": code, "timeout_seconds": 120})
        assert answer.is_error and "disk" in answer.structured_content["error"], answer.structured_content
        await still_serves(client)
    made = len(os.listdir(data_dir / "workspace" / "many"))
    assert made < 150_000, f"{made} files created before the stop"


async def test_a_session_thread_that_fills_the_disk_after_returning_is_stopped(data_dir: Path, tmp_path: Path):
    params = with_disk_quota_of_40_mb(data_dir, tmp_path)
    code = (
        "import threading\n"
        "def fill():\n    i = 0\n    while True:\n        write_file(f'bg/{i}.bin', 'x' * (4 << 20))\n        i += 1\n"
        "threading.Thread(target=fill).start()\nresult = 'returned'"
    )
    async with Client(params) as client:
        first = await client.call_tool("execute_code", {"code": code, "session_id": "filler"})
        assert first.structured_content["result"] == "returned"
        await anyio.sleep(3)
        # Between calls the session is stopped, so the thread may not have written anything yet (no bg/ at all);
        # whatever it did write is bounded.
        bg = data_dir / "workspace" / "bg"
        written = sum(f.stat().st_size for f in bg.iterdir()) if bg.exists() else 0
        assert written < 400 << 20, f"{written >> 20} MB written after the call returned"
        again = await client.call_tool("execute_code", {"code": "result = 'counter' in globals()", "session_id": "filler"})
        assert again.structured_content["success"], again.structured_content


@pytest.mark.parametrize("zygote", [True, False])
def test_sandboxes_die_with_a_killed_server(data_dir: Path, tmp_path: Path, zygote: bool):
    # The session's interpreter is stopped between calls; its sandbox must still die with the server, forked
    # (its zygote is outside the sandbox) or cold (its launcher, inside the sandbox's cgroup, is never stopped).
    marker = "7777.25" if zygote else "7777.5"
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"sandbox": {"zygote": zygote}}))
    proc, call = raw_stdio_server([str(BIN), "--data-dir", str(data_dir), "--config", str(config), "--log-level",
                                   "error", "serve"])
    code = f"import subprocess, threading\nsubprocess.Popen(['sleep', '{marker}'])\nthreading.Thread(target=lambda: [0 for _ in iter(int, 1)]).start()\nresult = 1"
    assert call(2, "execute_code", {"code": code, "session_id": "orphan"})["result"] == 1
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        left = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True).stdout.strip()
        if not left:
            break
        time.sleep(0.2)
    assert not left, "sandboxed processes outlived the server"


async def test_a_huge_single_file_hits_the_file_size_limit(data_dir: Path):
    async with Client(stdio_params(data_dir)) as client:
        code = "with open('huge.bin', 'wb') as f:\n    f.seek(300 << 20)\n    f.write(b'x')"
        answer = await client.call_tool("execute_code", {"code": code})
        assert answer.is_error and "File too large" in answer.structured_content["error"], answer.structured_content
        await still_serves(client)
