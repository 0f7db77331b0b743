"""Fixtures that start the real binary and find the real clients."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("CEM_BIN", REPO / "target" / "debug" / "code-execution-mcp"))
JS = REPO / "tests" / "js"
CLIENTS = Path(__file__).resolve().parent / "clients"
SDK1_PYTHON = Path(os.environ.get("CEM_SDK1_PYTHON", REPO / ".test-env" / "sdk1" / "bin" / "python"))
# mcp-server-git and mcp-server-time live in their own virtualenv.
SERVERS_PYTHON = Path(os.environ.get("CEM_SERVERS_PYTHON", REPO / ".test-env" / "servers" / "bin" / "python"))
# The installer the host runs for sandbox.packages (scripts/test puts it in the SDK 2.x virtualenv).
UV = os.environ.get("CEM_UV", str(REPO / ".test-env" / "sdk2" / "bin" / "uv"))


def package_data_dir(tmp_path_factory, name: str) -> Path:
    """A data directory for a module whose tests share one declared package environment (built once)."""
    assert Path(UV).is_file(), f"uv is missing at {UV}; set CEM_UV (scripts/test installs it)"
    d = tmp_path_factory.mktemp(name) / "data"
    d.mkdir()
    return d


def pytest_configure(config):
    if not BIN.exists():
        raise pytest.UsageError(f"{BIN} is missing; run `cargo build` or scripts/test")


# Every tool tools/list shows, in order (the full set).
ALL_TOOLS = ["execute_code", "search_tools", "get_tool_definition", "list_tool_categories", "write_workspace_file",
             "read_workspace_file", "list_workspace_files", "get_execution_stats", "sanitize_pii", "restore_pii",
             "save_skill", "load_skill", "list_skills", "delete_skill"]


@pytest.fixture(scope="session", autouse=True)
def no_mounts_left(tmp_path_factory):
    """Servers run as root mount each workspace on its own file system and undo it when they end; one a test
    killed leaves its mounts (the next server on that data directory reuses them). Undone here, so no run
    leaves loop devices behind."""
    yield
    for point in _mounts_under(str(tmp_path_factory.getbasetemp())):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)


def _mounts_under(base: str) -> list[str]:
    """The mounts under `base`, deepest first. The write-rate rules of the workspace images among them are
    cleared on the way (servers set one per tenant's loop device, and it would hold whatever gets the device's
    number next), since every caller unmounts them."""
    with open("/proc/self/mountinfo") as f:
        table = [line.split() for line in f]
    inside = [fields for fields in table if fields[4] == base or fields[4].startswith(base + "/")]
    rules = Path("/sys/fs/cgroup/blkio/blkio.throttle.write_bps_device")
    for fields in inside:
        if fields[4].endswith(".workspace-fs") and rules.exists():
            try:
                rules.write_text(f"{fields[2]} 0")
            except OSError:
                pass
    return sorted((fields[4] for fields in inside), key=len, reverse=True)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed:
        item.stash.setdefault(_FAILED, True)
    return report


_FAILED = pytest.StashKey[bool]()


@pytest.fixture(autouse=True)
def _tmp_path_freed(request):
    """A passing test's files go as soon as it ends (a failing test's stay for a look): each data directory holds
    a workspace file system image and a PostgreSQL or three, and the whole suite kept them all until the end,
    some 12 GB at its peak, enough to fill a small disk halfway through. Set up before (so torn down after)
    every fixture that uses tmp_path, so its servers have stopped."""
    if "tmp_path" not in request.fixturenames:
        yield
        return
    base = str(request.getfixturevalue("tmp_path"))
    yield
    if request.node.stash.get(_FAILED, False):
        return
    for point in _mounts_under(base):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    d.mkdir()
    return d


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("CODE_EXECUTION_MCP_")}
    full_env.update(env or {})
    return subprocess.run(
        [str(BIN), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=full_env, stdin=subprocess.DEVNULL
    )


@dataclass
class HttpServer:
    proc: subprocess.Popen
    url: str
    port: int
    log: Path

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def start_http(data_dir: Path, *extra: str, env: dict | None = None, addr: str = "127.0.0.1:0",
               config: Path | None = None) -> HttpServer:
    """Starts `serve --http ADDR` (with `--config CONFIG`) and waits for its 'listening on' line."""
    log = data_dir.parent / f"http-{time.monotonic_ns()}.log"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("CODE_EXECUTION_MCP_")}
    full_env.update(env or {})
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [str(BIN), "--data-dir", str(data_dir), *(["--config", str(config)] if config else []),
             "serve", "--http", addr, *extra],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=full_env,
            cwd=data_dir,
        )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        m = re.search(r"listening on (http://127\.0\.0\.1:(\d+)/mcp)", log.read_text(errors="replace"))
        if m:
            return HttpServer(proc, m.group(1), int(m.group(2)), log)
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {log.read_text()}")
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"server did not start listening: {log.read_text()}")


@pytest.fixture
def http_server(data_dir: Path):
    server = start_http(data_dir)
    yield server
    server.stop()


@pytest.fixture
def authed_server(data_dir: Path):
    server = start_http(data_dir, "--auth-token", "test-token-123")
    yield server
    server.stop()


def raw_stdio_server(args: list[str]):
    """A server on stdio spoken to in bare JSON-RPC lines, already initialized (for tests that kill it, which a
    client library would not let them do mid-session). Gives the process and `call(id, tool, arguments)`,
    which answers the tool's structured content."""
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def send(msg):
        proc.stdin.write(json.dumps(msg) + "\n")
        proc.stdin.flush()

    send({"jsonrpc": "2.0", "id": 0, "method": "initialize",
          "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    proc.stdout.readline()
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def call(id: int, tool: str, arguments: dict):
        send({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})
        return json.loads(proc.stdout.readline())["result"]["structuredContent"]

    return proc, call


def stdio_params(data_dir: Path, *extra: str):
    from mcp import StdioServerParameters

    return StdioServerParameters(
        command=str(BIN), args=["--data-dir", str(data_dir), "--log-level", "warn", "serve", *extra]
    )
