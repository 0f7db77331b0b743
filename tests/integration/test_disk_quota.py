"""The kernel holds the disk quota: each workspace is its own file system, and a write past the quota fails
in the code (ENOSPC) instead of being written and then stopped. Where the host cannot (not root, no
mkfs.ext4), `auto` falls back to the watchdog and says so; `kernel` refuses to start."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from conftest import BIN, raw_stdio_server, start_http, stdio_params
from stateless import Stateless

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("mkfs.ext4") is None,
        reason="the workspace's own file system needs root and mkfs.ext4",
    ),
]


@pytest.fixture
def anyio_backend():
    return "asyncio"

MB = 1 << 20


def params(data_dir: Path, tmp_path: Path, config: dict, env: dict | None = None) -> StdioServerParameters:
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(config))
    p = stdio_params(data_dir)
    p.args = ["--config", str(path), *p.args]
    if env is not None:
        p.env = env
    return p


def quota_of(mb: int, **sandbox) -> dict:
    return {"sandbox": {"disk_quota_mb": mb, **sandbox}}


def allocated(root: Path) -> int:
    """Bytes the files under `root` take on disk (blocks, not sizes: sparse and fallocated files count as they are)."""
    total = 0
    for dirpath, _, files in os.walk(root):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def mounts_under(path: Path) -> list[str]:
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    return [p for p in points if p.startswith(str(path))]


async def held_by(client: Client) -> dict:
    stats = await client.call_tool("get_execution_stats", {})
    return stats.structured_content["sandbox"]["disk_quota"]


async def test_fallocate_past_the_quota_is_refused_at_write_time(data_dir: Path, tmp_path: Path):
    # The watchdog let 40 x 255 MB of posix_fallocate land (10 GB) before its poll: now the first call that
    # would pass 40 MB fails in the code, and nothing past the quota is on disk at any instant.
    code = (
        "import os\nmade = 0\n"
        "try:\n"
        "    for i in range(40):\n"
        "        fd = os.open(f'big/{i}', os.O_CREAT | os.O_WRONLY)\n"
        "        os.posix_fallocate(fd, 0, 255 << 20)\n"
        "        os.close(fd)\n"
        "        made += 1\n"
        "except OSError as e:\n"
        "    result = {'made': made, 'errno': e.errno}\n"
    )
    async with Client(params(data_dir, tmp_path, quota_of(40))) as client:
        assert (await held_by(client))["held_by"] == "kernel"
        await client.call_tool("execute_code", {"code": "import os\nos.mkdir('big')"})
        answer = await client.call_tool("execute_code", {"code": code})
        s = answer.structured_content
        assert s["success"] and s["result"] == {"made": 0, "errno": 28}, s
        assert allocated(data_dir / "workspace") <= 40 * MB
        # Uncaught, the answer says which limit and what to do.
        failed = await client.call_tool("execute_code", {"code": "open('one', 'wb').write(b'x' * (60 << 20))"})
        f = failed.structured_content
        assert failed.is_error and "[Errno 28]" in f["error"], f
        assert "sandbox.disk_quota_mb" in f["note"] and "40 MB" in f["note"], f
        ok = await client.call_tool("execute_code", {"code": "result = 6 * 7"})
        assert ok.structured_content["result"] == 42


async def test_files_unlinked_while_mapped_count_against_the_quota(data_dir: Path, tmp_path: Path):
    # Created, fallocated, mapped, closed and unlinked: no folder shows them, and the watchdog never saw
    # the 8 GB they held. The file system counts every block it hands out.
    code = (
        "import os, mmap\nheld = []\n"
        "try:\n"
        "    for i in range(32):\n"
        "        fd = os.open(f'g{i}', os.O_CREAT | os.O_RDWR)\n"
        "        os.posix_fallocate(fd, 0, 255 << 20)\n"
        "        held.append(mmap.mmap(fd, 4096))\n"
        "        os.close(fd)\n"
        "        os.unlink(f'g{i}')\n"
        "    result = 'all held'\n"
        "except OSError as e:\n"
        "    st = os.statvfs('.')\n"
        "    result = {'held': len(held), 'errno': e.errno}\n"
    )
    async with Client(params(data_dir, tmp_path, quota_of(64))) as client:
        answer = await client.call_tool("execute_code", {"code": code})
        assert answer.structured_content["result"] == {"held": 0, "errno": 28}, answer.structured_content


async def test_sparse_files_and_hard_links_count_what_they_take(data_dir: Path, tmp_path: Path):
    # A byte written 30 MB into a file takes one block; a hard link takes none. What is really written
    # still stops at the quota. (No file may be larger than the quota: RLIMIT_FSIZE.)
    code = (
        "import os\n"
        "with open('sparse', 'wb') as f:\n    f.seek(30 << 20)\n    f.write(b'x')\n"
        "os.link('sparse', 'link')\n"
        "size = os.path.getsize('link')\n"
        "written = 0\n"
        "try:\n"
        "    with open('real', 'wb') as f:\n"
        "        while True:\n"
        "            f.write(b'y' * (1 << 20))\n"
        "            f.flush()\n"
        "            written += 1\n"
        "except OSError as e:\n"
        "    result = {'size': size, 'written_mb': written, 'errno': e.errno}\n"
    )
    async with Client(params(data_dir, tmp_path, quota_of(32))) as client:
        answer = await client.call_tool("execute_code", {"code": code})
        r = answer.structured_content["result"]
        assert r is not None, answer.structured_content
        assert r["size"] == (30 << 20) + 1 and r["errno"] == 28, answer.structured_content
        assert 24 <= r["written_mb"] <= 32, r
    assert allocated(data_dir / "workspace") <= 32 * MB


async def test_each_execution_gets_its_quota_again(data_dir: Path, tmp_path: Path):
    # The quota is per execution: what one wrote stays, and the next may add its own 20 MB.
    write = (
        "import os\nn = 0\n"
        "try:\n"
        "    while True:\n"
        "        open(f'part{CALL}-{n}', 'wb').write(b'z' * (1 << 20))\n"
        "        n += 1\n"
        "except OSError:\n"
        "    result = n\n"
    )
    async with Client(params(data_dir, tmp_path, quota_of(20))) as client:
        counts = []
        for call in range(3):
            answer = await client.call_tool("execute_code", {"code": write.replace("CALL", str(call))})
            counts.append(answer.structured_content["result"])
        assert all(15 <= c <= 20 for c in counts), counts
        # Each call's last file was made but could not be filled.
        listed = await client.call_tool(
            "execute_code", {"code": "import os\nresult = sum(os.path.getsize(f) == 1 << 20 for f in os.listdir('.'))"}
        )
        assert listed.structured_content["result"] == sum(counts)


async def test_executions_running_together_share_one_quota(data_dir: Path, tmp_path: Path):
    # Two executions of one workspace at once cannot add a quota each.
    code = (
        "import os, time\nn = 0\n"
        "try:\n"
        "    while n < 200:\n"
        "        open(f'NAME-{n}', 'wb').write(b'z' * (1 << 20))\n"
        "        n += 1\n"
        "        time.sleep(0.01)\n"
        "except OSError:\n"
        "    pass\n"
        "result = n\n"
    )
    async with Client(params(data_dir, tmp_path, quota_of(30))) as client:
        results = {}

        async def run(name: str):
            answer = await client.call_tool("execute_code", {"code": code.replace("NAME", name)})
            assert answer.structured_content["success"], answer.structured_content
            results[name] = answer.structured_content["result"]

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "a")
            tg.start_soon(run, "b")
        assert sum(results.values()) <= 30, results
    assert allocated(data_dir / "workspace") <= 30 * MB


async def test_the_tenant_workspace_quota_is_held_by_the_kernel_too(data_dir: Path, tmp_path: Path):
    # quotas.workspace_bytes: an execution may add only what is left of it.
    config = {"sandbox": {"disk_quota_mb": 1024}, "quotas": {"workspace_bytes": 24 * MB}}
    code = (
        "n = 0\n"
        "try:\n"
        "    while True:\n"
        "        open(f'w{n}', 'wb').write(b'q' * (1 << 20))\n"
        "        n += 1\n"
        "except OSError:\n"
        "    result = n\n"
    )
    async with Client(params(data_dir, tmp_path, config)) as client:
        first = await client.call_tool("execute_code", {"code": code})
        assert 18 <= first.structured_content["result"] <= 24, first.structured_content
    assert allocated(data_dir / "workspace") <= 24 * MB


def unmount_all(data_dir: Path) -> None:
    """What a reboot does to the server's mounts."""
    for point in sorted(mounts_under(data_dir), key=len, reverse=True):
        subprocess.run(["umount", point], check=True)


async def test_a_workspace_from_before_moves_onto_its_file_system_and_stays(data_dir: Path, tmp_path: Path):
    # Files of a workspace made before (or by the watchdog mode) move onto the image. The mounts outlive the
    # server, so what code wrote is where the host looks for it after the server ends; after a reboot (the
    # mounts undone) the next server mounts the image again.
    ws = data_dir / "workspace"
    (ws / "notes").mkdir(parents=True)
    (ws / "notes" / "old.txt").write_text("kept")
    config = quota_of(16)
    async with Client(params(data_dir, tmp_path, config)) as client:
        read = await client.call_tool("execute_code", {"code": "result = open('notes/old.txt').read()"})
        assert read.structured_content["result"] == "kept", read.structured_content
        await client.call_tool("execute_code", {"code": "open('new.txt', 'w').write('made inside')"})
        assert (ws / "new.txt").read_text() == "made inside"
        assert str(ws) in mounts_under(data_dir)
    assert (ws / "new.txt").read_text() == "made inside"
    unmount_all(data_dir)
    assert not (ws / "new.txt").exists() and not (ws / "notes").exists()
    async with Client(params(data_dir, tmp_path, config)) as client:
        again = await client.call_tool(
            "execute_code", {"code": "result = [open('notes/old.txt').read(), open('new.txt').read()]"}
        )
        assert again.structured_content["result"] == ["kept", "made inside"], again.structured_content


def test_a_killed_servers_mounts_are_used_by_the_next(data_dir: Path, tmp_path: Path):
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps(quota_of(16)))
    args = [str(BIN), "--data-dir", str(data_dir), "--config", str(cfg), "--log-level", "error", "serve"]

    def session(kill: bool) -> str:
        proc, call = raw_stdio_server(args)
        code = (
            "import os\nopen(f'mark{len(os.listdir())}', 'w').write('x')\nmarks = sorted(os.listdir())\n"
            "try:\n    open('big', 'wb').write(b'x' * (32 << 20))\n    errno = 0\n"
            "except OSError as e:\n    errno = e.errno\nos.unlink('big')\nresult = [marks, errno]"
        )
        answer = call(2, "execute_code", {"code": code})["result"]
        if kill:
            proc.kill()
        else:
            proc.stdin.close()
        proc.wait(timeout=20)
        return answer

    # Each server's execution is held to its 16 MB, on the mounts it made or found.
    assert session(kill=True) == [["mark0"], 28]
    assert len(mounts_under(data_dir)) == 2
    assert session(kill=False) == [["mark0", "mark1"], 28]
    assert len(mounts_under(data_dir)) == 2  # used as they were, not mounted twice


async def test_a_workspace_on_its_image_is_never_shown_empty(data_dir: Path, tmp_path: Path):
    # After a reboot, a server that cannot mount the image (asked for the watchdog, or without mkfs.ext4)
    # would show an empty workspace: it refuses to start and says where the files are.
    async with Client(params(data_dir, tmp_path, quota_of(16))) as client:
        await client.call_tool("execute_code", {"code": "open('precious.txt', 'w').write('x')"})
    unmount_all(data_dir)
    cfg = tmp_path / "watchdog.json"
    cfg.write_text(json.dumps(quota_of(16, disk_quota_mode="watchdog")))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODE_EXECUTION_MCP_")}
    proc = subprocess.run([str(BIN), "--data-dir", str(data_dir), "--config", str(cfg), "serve"],
                          capture_output=True, text=True, timeout=30, env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode != 0
    assert "workspace.img" in proc.stderr and "watchdog" in proc.stderr, proc.stderr
    assert mounts_under(data_dir) == []


async def test_without_mkfs_auto_falls_back_to_the_watchdog_and_says_so(data_dir: Path, tmp_path: Path):
    env = {**os.environ, "PATH": "/usr/bin:/bin"}  # mkfs.ext4 lives in /usr/sbin
    async with Client(params(data_dir, tmp_path, quota_of(40), env=env)) as client:
        held = await held_by(client)
        assert held["held_by"] == "watchdog" and "mkfs.ext4" in held["why"], held
        ok = await client.call_tool("execute_code", {"code": "result = 6 * 7"})
        assert ok.structured_content["result"] == 42
    assert mounts_under(data_dir) == []


def test_kernel_mode_refuses_to_start_where_it_cannot_hold(data_dir: Path, tmp_path: Path):
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps(quota_of(40, disk_quota_mode="kernel")))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODE_EXECUTION_MCP_")}
    env["PATH"] = "/usr/bin:/bin"
    proc = subprocess.run([str(BIN), "--data-dir", str(data_dir), "--config", str(cfg), "serve"],
                          capture_output=True, text=True, timeout=30, env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode != 0
    assert "sandbox.disk_quota_mode" in proc.stderr and "mkfs.ext4" in proc.stderr, proc.stderr


async def test_watchdog_mode_is_there_when_asked_for(data_dir: Path, tmp_path: Path):
    async with Client(params(data_dir, tmp_path, quota_of(40, disk_quota_mode="watchdog"))) as client:
        held = await held_by(client)
        assert held["held_by"] == "watchdog" and "disk_quota_mode" in held["why"], held
    assert mounts_under(data_dir) == []


def loop_of(mount: str) -> str | None:
    """The device mounted at `mount` (the last mount there wins)."""
    with open("/proc/self/mountinfo") as f:
        found = [line.split(" - ")[1].split()[1] for line in f if line.split()[4] == mount]
    return found[-1] if found else None


async def test_a_workspaces_writes_are_paced_on_its_own_device(data_dir: Path, tmp_path: Path):
    # A tenant filling its quota as fast as it could left hundreds of megabytes of dirty pages, twice over (in
    # its image's file system and in the host's, for the image file), and every other tenant's fsync'd
    # workspace write queued behind them (748 ms at p99 in the soak, 16 ms alone). Each workspace's loop
    # device now has its own strict writeback limit and writes to its image with direct I/O.
    async with Client(params(data_dir, tmp_path, quota_of(64))) as client:
        answer = await client.call_tool("execute_code", {"code": "open('x', 'wb').write(b'1' * 1000)\nresult = 1"})
        assert answer.structured_content["result"] == 1
        images = [p for p in mounts_under(data_dir) if loop_of(p) and loop_of(p).startswith("/dev/loop")]
        assert images, mounts_under(data_dir)
        device = loop_of(images[0])
        rdev = os.stat(device).st_rdev
        bdi = Path(f"/sys/class/bdi/{os.major(rdev)}:{os.minor(rdev)}")
        assert (bdi / "strict_limit").read_text().strip() == "1"
        if (bdi / "max_bytes").exists():
            # The kernel keeps the limit as a share (in millionths) of the host's dirty threshold, which moves
            # with free memory, and reads it back through the threshold of the moment: the 4 MB written comes
            # back moved by however much free memory has moved since. Left unset it would be the whole
            # threshold, hundreds of megabytes or more.
            assert 2 * MB < int((bdi / "max_bytes").read_text()) < 8 * MB
        listed = subprocess.run(["losetup", "--noheadings", "--output", "DIO", device],
                                capture_output=True, text=True, check=True)
        assert listed.stdout.strip() == "1", listed
        # The local tenant's writes are not rate-limited (its host is its own): no rule for its device.
        rules = blkio_rules()
        if rules is not None:
            assert f"{os.major(rdev)}:{os.minor(rdev)}" not in rules, rules


BLKIO_RULES = Path("/sys/fs/cgroup/blkio/blkio.throttle.write_bps_device")


def blkio_rules() -> dict[str, int] | None:
    """The host's write-rate rules by device (cgroup v1 blkio root), None where the server cannot set them: no
    blkio hierarchy, or only a part of it visible (its root is not "/")."""
    with open("/proc/self/mountinfo") as f:
        roots = [line.split()[3] for line in f if " - cgroup " in line and "blkio" in line.split()[-1].split(",")]
    if roots != ["/"] or not BLKIO_RULES.exists():
        return None
    return {dev: int(bps) for dev, bps in (line.split() for line in BLKIO_RULES.read_text().splitlines())}


def image_devices(data_dir: Path) -> list[tuple[str, str]]:
    """(the folder holding the image, major:minor of its loop device) for each workspace image mounted."""
    found = []
    for image in [p for p in mounts_under(data_dir) if p.endswith(".workspace-fs")]:
        rdev = os.stat(loop_of(image)).st_rdev
        found.append((Path(image).parent.name, f"{os.major(rdev)}:{os.minor(rdev)}"))
    return found


def test_a_tenants_workspace_writes_are_held_to_its_rate(data_dir: Path, tmp_path: Path):
    # A tenant writing 8 MB blocks until its quota made every other tenant's fsync'd workspace write wait on
    # the host's journal (p99 20 -> 112 ms in the soak). Each tenant's loop device now has a write-rate rule
    # (sandbox.tenant_disk_mb_per_second) that holds the kernel's writeback and the code's own writes: the
    # code's writes and fsync wait for the rate.
    if blkio_rules() is None:
        pytest.skip("no cgroup v1 blkio hierarchy whose root is visible here")
    tokens = {"alice": "alice-token-0123456789abcdef", "bob": "bob-token-0123456789abcdef"}
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"auth": {"tokens": tokens},
                                  "sandbox": {"disk_quota_mb": 64, "tenant_disk_mb_per_second": 4}}))
    server = start_http(data_dir, config=config)
    devices = []
    try:
        alice, bob = Stateless(server.url, tokens["alice"]), Stateless(server.url, tokens["bob"])
        code = ("import os, time\nstarted = time.monotonic()\nwith open('big', 'wb') as f:\n"
                "    for _ in range(32):\n        f.write(b'x' * (1 << 20))\n    f.flush()\n    os.fsync(f.fileno())\n"
                "result = time.monotonic() - started")
        answer = alice.call("execute_code", {"code": code, "timeout_seconds": 60})
        assert answer["success"], answer
        # 32 MB at 4 MB/s: about 8 s. The dirty-page limit lets a few MB go first, and where the server is not
        # in the root blkio group the rate holds in each of two groups (twice it at most): over 2.5 s either
        # way. Unlimited, 0.1 s.
        assert answer["result"] > 2.5, answer
        assert bob.call("write_workspace_file", {"filename": "n.txt", "content": "x" * 4000})["success"]
        devices = image_devices(data_dir)
        rules = blkio_rules() or {}
        # The two tenants' images, and the local tenant's (the server's own, at the data directory's top).
        assert sorted(name for name, _ in devices) == ["data", "token-alice", "token-bob"], devices
        assert {name: rules.get(device) for name, device in devices} == \
            {"data": None, "token-alice": 4 * MB, "token-bob": 4 * MB}, (devices, rules)
    finally:
        server.stop()
        # A rule outlives the server, like the mount it is for; loop devices are reused by the next test.
        for _, device in devices or image_devices(data_dir):
            BLKIO_RULES.write_text(f"{device} 0")
