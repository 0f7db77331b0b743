"""Disk quotas held by the kernel (the workspace its own file system) against the watchdog, in one run.

    .test-env/sdk2/bin/python bench/bench_disk.py BINARY [--rounds 60]

(any Python with the MCP Python SDK, run as root with mkfs.ext4; scripts/bench disk runs it.) Two stdio
servers, `sandbox.disk_quota_mode` "kernel" and "watchdog", both with `disk_quota_mb` 1024, taking turns
call by call so a noisy neighbour slows both alike:

1. what the kernel's reserve costs an execution: `result = 1` back to back, and an execution that writes
   64 MB and deletes it (the reserve is resized by what changed, before and after each execution);
2. what each lets through: 40 x 255 MB of `posix_fallocate`, and 32 x 255 MB allocated, mapped, closed
   and unlinked (invisible in any folder), with the most the workspace's file system held while it ran
   (sampled by the bench every 5 ms) and what stayed after.

Prints one JSON object; medians in milliseconds, ratios kernel / watchdog.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from contextlib import AsyncExitStack
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_hostile import unmount_under  # noqa: E402

TINY = "result = 1"
WRITE = "open('w.bin', 'wb').write(b'x' * (64 << 20))\nimport os\nos.unlink('w.bin')\nresult = 1"
FALLOCATE = (
    "import os\nmade = 0\n"
    "try:\n"
    "    for i in range(40):\n"
    "        fd = os.open(f'f{i}', os.O_CREAT | os.O_WRONLY)\n"
    "        os.posix_fallocate(fd, 0, 255 << 20)\n"
    "        os.close(fd)\n"
    "        made += 1\n"
    "except OSError as e:\n"
    "    pass\n"
    "result = made\n"
)
MAPPED = (
    "import os, mmap\nheld = []\n"
    "try:\n"
    "    for i in range(32):\n"
    "        fd = os.open(f'g{i}', os.O_CREAT | os.O_RDWR)\n"
    "        os.posix_fallocate(fd, 0, 255 << 20)\n"
    "        held.append(mmap.mmap(fd, 4096))\n"
    "        os.close(fd)\n"
    "        os.unlink(f'g{i}')\n"
    "except OSError:\n"
    "    pass\n"
    "import time\ntime.sleep(0.5)\n"
    "result = len(held)\n"
)
CLEAN = "import os\nfor f in os.listdir('.'):\n    os.unlink(f)\nresult = 1"


def used_bytes(path: Path) -> int:
    """Bytes in use on the file system at `path` (the kernel's own count: unlinked files too)."""
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def reserve_bytes(data: Path) -> int:
    reserve = data / ".workspace-fs" / "reserve"
    try:
        return os.stat(reserve).st_blocks * 512
    except OSError:
        return 0


class Peak:
    """The most the workspace held (its file system's use, less the reserve) while a call ran."""

    def __init__(self, data: Path):
        self.data, self.most, self.stop = data, 0, threading.Event()
        self.base = self.sample()

    def sample(self) -> int:
        return used_bytes(self.data / "workspace") - reserve_bytes(self.data)

    def run(self):
        while not self.stop.is_set():
            self.most = max(self.most, self.sample() - self.base)
            time.sleep(0.005)


async def timed(session: ClientSession, code: str) -> tuple[float, dict]:
    start = time.perf_counter()
    answer = await session.call_tool("execute_code", {"code": code, "timeout_seconds": 120})
    return (time.perf_counter() - start) * 1000, answer.structured_content


async def attack(session: ClientSession, data: Path, code: str) -> dict:
    peak = Peak(data)
    thread = threading.Thread(target=peak.run)
    thread.start()
    ms, answer = await timed(session, code)
    peak.stop.set()
    thread.join()
    after = peak.sample() - peak.base
    await timed(session, CLEAN)
    return {"peak_mb": peak.most >> 20, "after_mb": after >> 20, "ms": round(ms), "result": answer.get("result"),
            "error": (answer.get("error") or "")[:120]}


async def main(binary: str, rounds: int) -> dict:
    modes = ("kernel", "watchdog")
    root = Path(tempfile.mkdtemp(prefix="cem-bench-disk-"))
    async with AsyncExitStack() as stack:
        sessions, dirs = {}, {}
        for mode in modes:
            data = root / mode
            cfg = root / f"{mode}.json"
            cfg.write_text(json.dumps({"sandbox": {"disk_quota_mb": 1024, "disk_quota_mode": mode}}))
            params = StdioServerParameters(
                command=binary, args=["--data-dir", str(data), "--config", str(cfg), "--log-level", "error", "serve"]
            )
            read, write = await stack.enter_async_context(stdio_client(params))
            session = await stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
            for _ in range(5):
                await timed(session, TINY)
            sessions[mode], dirs[mode] = session, data
        out: dict = {"rounds": rounds}
        for name, code, n in (("result = 1", TINY, rounds), ("write 64 MB and delete it", WRITE, max(rounds // 3, 5))):
            times = {m: [] for m in modes}
            for _ in range(n):
                for mode in modes:
                    ms, answer = await timed(sessions[mode], code)
                    assert answer.get("success"), answer
                    times[mode].append(ms)
            med = {m: statistics.median(t) for m, t in times.items()}
            out[name] = {**{f"{m}_ms": round(v, 1) for m, v in med.items()},
                         "ratio": round(med["kernel"] / med["watchdog"], 2)}
        for name, code in (("fallocate 40 x 255 MB", FALLOCATE), ("mapped and unlinked 32 x 255 MB", MAPPED)):
            out[name] = {mode: await attack(sessions[mode], dirs[mode], code) for mode in modes}
    unmount_under(root)
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    rounds = int(args[args.index("--rounds") + 1]) if "--rounds" in args else 60
    print(json.dumps(asyncio.run(main(args[0], rounds)), indent=2))
