"""A real PostgreSQL and a real HAProxy for the multi-node tests (Debian packages, installed by scripts/test).

    with Postgres.start(tmp_path) as pg:                  # pg.url = postgres://cem@127.0.0.1:PORT/cem
        nodes = [start_http(...), start_http(...)]        # each node with pg.url
        with Balancer.start(tmp_path, [n.port for n in nodes]) as lb:
            ...                                           # clients talk to lb.url (http://127.0.0.1:PORT/mcp)

PostgreSQL refuses to run as root, so when the tests run as root the server runs as the `postgres` system
user (created by the Debian package). Its data and socket directory is a fresh directory under /tmp rather
than under tmp_dir: pytest's base temporary directory is private to root (mode 0700), and a Unix socket
path must stay under 108 bytes. The directory is removed by stop(); the logs stay in tmp_dir.

The balancer spreads every request (not every connection) round-robin over the nodes, checks GET /readyz
every 500 ms (down after 2 failures, up after 1 success), and never retries or redispatches a request to
another node, so a test sees exactly what the node that got the request answered.
"""

from __future__ import annotations

import csv
import io
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

PG_USER = "cem"
PG_DB = "cem"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(log: Path, lines: int = 40) -> str:
    if not log.exists():
        return ""
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def _stop(proc: subprocess.Popen, sig: int, timeout: float) -> None:
    """Sends sig, waits up to timeout, then kills."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def pg_bin_dir() -> Path:
    """The newest /usr/lib/postgresql/VERSION/bin, else the directory of initdb on PATH."""
    def version(d: Path) -> tuple[int, ...]:
        try:
            return tuple(int(p) for p in d.parent.name.split("."))
        except ValueError:
            return ()
    dirs = [d for d in Path("/usr/lib/postgresql").glob("*/bin") if (d / "initdb").exists()]
    if dirs:
        return max(dirs, key=version)
    initdb = shutil.which("initdb")
    if initdb is None:
        raise RuntimeError("PostgreSQL is not installed (no initdb); run scripts/test")
    return Path(initdb).parent


class Postgres:
    """A throwaway PostgreSQL server on 127.0.0.1 with a database `cem` owned by `cem` (trust auth)."""

    def __init__(self, proc: subprocess.Popen, bin_dir: Path, port: int, scratch: Path, log: Path):
        self.proc = proc
        self.bin_dir = bin_dir
        self.port = port
        self.scratch = scratch  # the data directory (scratch/data) and the Unix socket
        self.log = log

    @property
    def url(self) -> str:
        return f"postgres://{PG_USER}@127.0.0.1:{self.port}/{PG_DB}"

    @classmethod
    def start(cls, tmp_dir: Path, timeout: float = 30) -> Postgres:
        """initdb, start the server, wait until it accepts connections, create the database."""
        bin_dir = pg_bin_dir()
        stamp = time.monotonic_ns()
        log = tmp_dir / f"postgres-{stamp}.log"
        scratch = Path(tempfile.mkdtemp(prefix="cem-pg-"))
        as_user: dict = {}
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(scratch, pw.pw_uid, pw.pw_gid)
            as_user = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
        data = scratch / "data"
        try:
            init = subprocess.run(
                [str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", PG_USER, "--no-sync",
                 "-E", "UTF8", "--locale=C"],
                capture_output=True, text=True, timeout=60, cwd=scratch, stdin=subprocess.DEVNULL, **as_user)
            log.write_text(init.stdout + init.stderr)
            if init.returncode != 0:
                raise RuntimeError(f"initdb failed ({init.returncode}):\n{_tail(log)}")
            port = free_port()
            with open(log, "ab") as out:
                proc = subprocess.Popen(
                    [str(bin_dir / "postgres"), "-D", str(data), "-p", str(port), "-k", str(scratch),
                     "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
                     "-c", "full_page_writes=off", "-c", "max_connections=200"],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=out, cwd=scratch, **as_user)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        pg = cls(proc, bin_dir, port, scratch, log)
        try:
            pg._wait_ready(timeout)
            pg._client("createdb", PG_DB)
        except BaseException:
            pg.stop()
            raise
        return pg

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited with {self.proc.returncode}:\n{_tail(self.log)}")
            ready = subprocess.run([str(self.bin_dir / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)],
                                   stdin=subprocess.DEVNULL, capture_output=True, timeout=10)
            if ready.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"postgres did not accept connections within {timeout} s:\n{_tail(self.log)}")
            time.sleep(0.1)

    def _client(self, tool: str, *args: str, timeout: float = 30) -> str:
        """Runs a client program of the bin dir as `cem` over TCP; its stdout, or RuntimeError with its stderr."""
        r = subprocess.run([str(self.bin_dir / tool), "-h", "127.0.0.1", "-p", str(self.port), "-U", PG_USER, *args],
                           capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            raise RuntimeError(f"{tool} {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
        return r.stdout

    def psql(self, sql: str) -> str:
        """Runs sql in the database (psql -At, stops at the first error); its output without the final newline."""
        return self._client("psql", "-d", PG_DB, "-At", "-v", "ON_ERROR_STOP=1", "-c", sql).removesuffix("\n")

    def stop(self, timeout: float = 20) -> None:
        """Fast shutdown (SIGINT), kill after timeout; removes the data directory."""
        _stop(self.proc, signal.SIGINT, timeout)
        shutil.rmtree(self.scratch, ignore_errors=True)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def __enter__(self) -> Postgres:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


HAPROXY_CFG = """\
global
    log stderr format raw daemon
    maxconn 4096

defaults
    mode http
    log global
    option httplog
    timeout connect 2s
    timeout client 120s
    timeout server 120s
    timeout tunnel 1h
    retries 0

frontend mcp
    bind 127.0.0.1:{port}
    # Nodes relay to each other on /internal/ (with the deployment's node key): clients have no business there.
    http-request deny deny_status 404 if {{ path_beg /internal/ }}
    default_backend nodes

frontend stats
    bind 127.0.0.1:{stats_port}
    stats enable
    stats uri /stats

backend nodes
    balance roundrobin
    option http-server-close
    option httpchk GET /readyz
{servers}
"""


class Balancer:
    """HAProxy in front of the nodes (127.0.0.1:PORT each); its servers are named n1, n2, ... in order."""

    def __init__(self, proc: subprocess.Popen, port: int, stats_port: int, config: Path, log: Path):
        self.proc = proc
        self.port = port
        self.stats_port = stats_port
        self.config = config
        self.log = log

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    @classmethod
    def start(cls, tmp_dir: Path, backends: list[int], timeout: float = 10) -> Balancer:
        """Writes the config, starts `haproxy -db`, waits until its port accepts TCP connections."""
        haproxy = shutil.which("haproxy")
        if haproxy is None:
            raise RuntimeError("haproxy is not installed; run scripts/test")
        stamp = time.monotonic_ns()
        config, log = tmp_dir / f"haproxy-{stamp}.cfg", tmp_dir / f"haproxy-{stamp}.log"
        port, stats_port = free_port(), free_port()
        servers = "\n".join(f"    server n{i} 127.0.0.1:{p} check inter 500ms fall 2 rise 1"
                            for i, p in enumerate(backends, 1))
        config.write_text(HAPROXY_CFG.format(port=port, stats_port=stats_port, servers=servers))
        with open(log, "wb") as out:
            proc = subprocess.Popen([haproxy, "-db", "-f", str(config)],
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=out, cwd=tmp_dir)
        lb = cls(proc, port, stats_port, config, log)
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"haproxy exited with {proc.returncode}:\n{_tail(log)}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return lb
            except OSError:
                if time.monotonic() > deadline:
                    lb.stop()
                    raise RuntimeError(f"haproxy did not listen within {timeout} s:\n{_tail(log)}") from None
                time.sleep(0.05)

    def servers(self) -> dict[str, str]:
        """The health of each node as HAProxy sees it, e.g. {"n1": "UP", "n2": "DOWN"}."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.stats_port}/stats;csv", timeout=5) as r:
            rows = csv.DictReader(io.StringIO(r.read().decode().removeprefix("# ")))
            return {row["svname"]: row["status"] for row in rows
                    if row["pxname"] == "nodes" and row["svname"] not in ("FRONTEND", "BACKEND")}

    def wait_server(self, name: str, status: str, timeout: float = 10) -> None:
        """Waits until HAProxy reports node name (n1, n2, ...) with status ("UP" or "DOWN")."""
        deadline = time.monotonic() + timeout
        while (seen := self.servers().get(name)) != status:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} is {seen}, not {status}, after {timeout} s:\n{_tail(self.log)}")
            time.sleep(0.1)

    def stop(self, timeout: float = 10) -> None:
        _stop(self.proc, signal.SIGTERM, timeout)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def __enter__(self) -> Balancer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
