"""The deployment examples in deploy/ are checked by the tools that will read them: HAProxy's and Prometheus's
own config checks, systemd's unit verifier, and our own argument parser for every command line they give."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import BIN, REPO

DEPLOY = REPO / "deploy"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=60)


def parses(args: list[str]) -> None:
    """`args` is a command line our binary accepts (clap refuses an unknown flag before it reads --help)."""
    checked = run(str(BIN), *args, "--help")
    assert checked.returncode == 0, (args, checked.stderr)


def test_the_balancer_and_the_scrape_configs_pass_their_own_checks():
    haproxy = run("haproxy", "-c", "-f", str(DEPLOY / "compose" / "haproxy.cfg"))
    assert haproxy.returncode == 0 and "Configuration file is valid" in haproxy.stdout + haproxy.stderr, haproxy
    promtool = run("promtool", "check", "config", str(DEPLOY / "compose" / "prometheus.yml"))
    assert promtool.returncode == 0, promtool.stdout + promtool.stderr


def test_the_compose_file_runs_nodes_as_the_binary_takes_them():
    compose = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())
    services = compose["services"]
    nodes = [s for name, s in services.items() if name.startswith("node")]
    assert len(nodes) == 2
    help_text = run(str(BIN), "serve", "--help").stdout + run(str(BIN), "--help").stdout
    for node in nodes:
        parses(node["command"])
        for var in node["environment"]:
            assert var in help_text, f"{var} is not an environment variable the binary reads"
        assert "--metrics" in node["command"] and "--node-url" in node["command"]
    # Every node the balancer and Prometheus name exists; /readyz is the health check.
    balancer = (DEPLOY / "compose" / "haproxy.cfg").read_text()
    assert set(re.findall(r"server (node\d) \1:8765", balancer)) == {"node1", "node2"}
    assert "option httpchk GET /readyz" in balancer
    scrape = yaml.safe_load((DEPLOY / "compose" / "prometheus.yml").read_text())
    assert scrape["scrape_configs"][0]["static_configs"][0]["targets"] == ["node1:9464", "node2:9464"]


def test_the_systemd_unit_verifies_and_its_command_line_parses(tmp_path: Path):
    unit = (DEPLOY / "systemd" / "code-execution-mcp.service").read_text()
    exec_start = re.search(r"^ExecStart=(.*?)(?<!\\)$", unit, re.S | re.M)
    assert exec_start
    args = exec_start.group(1).replace("\\\n", " ").split()
    assert args[0] == "/usr/local/bin/code-execution-mcp"
    parses(args[1:])
    # Every variable the unit's environment file is said to hold is one the binary reads.
    help_text = run(str(BIN), "serve", "--help").stdout + run(str(BIN), "--help").stdout
    for var in re.findall(r"^#\s+(CODE_EXECUTION_MCP_\w+)=", unit, re.M):
        assert var in help_text, f"{var} is not an environment variable the binary reads"
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not on this machine; the command line was checked")
    # The unit as it would be installed, pointing at this build.
    local = tmp_path / "code-execution-mcp.service"
    local.write_text(unit.replace("/usr/local/bin/code-execution-mcp", str(BIN))
                     .replace("EnvironmentFile=/", "EnvironmentFile=-/"))
    verified = run("systemd-analyze", "verify", str(local))
    assert verified.returncode == 0, verified.stdout + verified.stderr
