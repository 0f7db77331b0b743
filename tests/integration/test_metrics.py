"""Prometheus metrics, scraped by a real Prometheus (Debian's package) after a scripted workload and checked
by PromQL; the exposition passes `promtool check metrics`; the listener is its own (nothing but /metrics)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import httpx2 as httpx

from cluster import free_port
from conftest import start_http
from stateless import Stateless
from test_upstream import EVERYTHING

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")


def serve_with_metrics(tmp_path: Path):
    data = tmp_path / "data"
    data.mkdir()
    config = tmp_path / "mcp_config.json"
    config.write_text(json.dumps({
        "mcpServers": {"everything": {"command": "node", "args": [EVERYTHING, "stdio"]}},
        "policy": {"rules": {"everything.get-sum": "deny"}},
        "quotas": {"executions_per_minute": 7},
    }))
    port = free_port()
    server = start_http(data, "--metrics", f"127.0.0.1:{port}", config=config)
    return server, f"http://127.0.0.1:{port}/metrics"


def workload(client: Stateless) -> None:
    """Two successes, an error, a timeout, a tool call allowed and one denied, then one execution past the
    quota of seven a minute."""
    assert client.call("execute_code", {"code": "result = 1"})["success"]
    assert client.call("execute_code", {"code": "result = call_tool('everything.echo', {'message': 'hi'})"})["success"]
    assert not client.call("execute_code", {"code": "raise ValueError('no')"})["success"]
    timed = client.call("execute_code", {"code": "import time\ntime.sleep(5)", "timeout_seconds": 1})
    assert "TimeoutError" in timed["error"], timed
    denied = client.call("execute_code", {"code": "call_tool('everything.get-sum', {'a': 1, 'b': 2})"})
    assert "policy denies" in denied["error"], denied
    assert client.call("execute_code", {"code": "result = 2"})["success"]
    assert client.call("execute_code", {"code": "result = 3"})["success"]
    refused = client.call("execute_code", {"code": "result = 4"})
    assert "quotas.executions_per_minute" in refused["error"], refused


def start_prometheus(tmp_path: Path, target: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    host = target.removeprefix("http://").removesuffix("/metrics")
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n"
        "scrape_configs:\n  - job_name: cem\n    static_configs:\n"
        f"      - targets: ['{host}']\n")
    check = subprocess.run([PROMTOOL, "check", "config", str(config)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    log = open(tmp_path / "prometheus.log", "wb")
    proc = subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=log)
    return proc, f"http://127.0.0.1:{port}"


def query(prometheus: str, promql: str) -> dict[str, float]:
    """The instant vector of `promql`, keyed by its labels (minus job and instance)."""
    r = httpx.get(f"{prometheus}/api/v1/query", params={"query": promql}, timeout=5)
    r.raise_for_status()
    out = {}
    for sample in r.json()["data"]["result"]:
        labels = {k: v for k, v in sample["metric"].items() if k not in ("job", "instance", "__name__")}
        out[",".join(f"{k}={v}" for k, v in sorted(labels.items()))] = float(sample["value"][1])
    return out


def test_prometheus_scrapes_what_the_workload_did(tmp_path: Path):
    assert PROMETHEUS and PROMTOOL, "prometheus and promtool are missing: apt-get install prometheus (scripts/test does)"
    server, metrics_url = serve_with_metrics(tmp_path)
    prometheus = None
    try:
        # The listener serves metrics only.
        assert httpx.get(metrics_url.replace("/metrics", "/mcp"), timeout=5).status_code == 404
        workload(Stateless(server.url))
        text = httpx.get(metrics_url, timeout=5).text
        linted = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True)
        assert linted.returncode == 0, linted.stdout + linted.stderr + text
        # No tenant, session or argument ever labels a series.
        labels = set(re.findall(r"(\w+)=\"", text))
        assert labels <= {"outcome", "server", "decision", "answer", "quota", "cap", "le"}, labels

        prometheus, api = start_prometheus(tmp_path, metrics_url)
        expected = {
            'cem_executions_total': {"outcome=success": 4, "outcome=error": 2, "outcome=timeout": 1,
                                     "outcome=refused": 0, "outcome=cancelled": 0},
            'cem_tool_calls_total': {"outcome=ok,server=everything": 1, "outcome=refused,server=everything": 1},
            'cem_policy_decisions_total{decision="deny"}': {"decision=deny": 1},
            'cem_quota_refusals_total': {"quota=executions_per_minute": 1},
            'cem_execution_duration_seconds_count': {"": 7},
            'cem_upstream_up': {"server=everything": 1},
            'cem_tenants': {"": 1},
        }
        deadline = time.monotonic() + 60
        got: dict = {}
        while time.monotonic() < deadline:
            try:
                got = {q: query(api, q) for q in expected}
            except (httpx.HTTPError, KeyError):
                got = {}
            if got == expected:
                break
            time.sleep(0.5)
        assert got == expected, (got, (tmp_path / "prometheus.log").read_text()[-2000:])
        # The histogram answers quantiles: the median execution took under the timeout's second or so.
        median = query(api, "histogram_quantile(0.5, sum by (le) (cem_execution_duration_seconds_bucket))")
        assert 0 < median[""] < 2.56, median
    finally:
        if prometheus:
            prometheus.terminate()
            prometheus.wait(timeout=10)
        server.stop()
