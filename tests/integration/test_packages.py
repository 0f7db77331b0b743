"""Packages in the sandbox: real installs from the package index by uv on the host,
used by sandboxed code that still has no network.

One data directory for the module: the declared environment is built once, and
later tests see what earlier ones installed (that is the reuse being tested).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from mcp import Client

from conftest import UV, package_data_dir, run_cli, stdio_params

pytestmark = pytest.mark.anyio



@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="module")
def pkg_data(tmp_path_factory) -> Path:
    return package_data_dir(tmp_path_factory, "packages")


def config(tmp: Path, name: str, **sandbox) -> Path:
    path = tmp / f"{name}.json"
    path.write_text(json.dumps({"mcpServers": {}, "sandbox": {"installer": UV, "pool_size": 1, **sandbox}}))
    return path


def params(data: Path, cfg: Path):
    p = stdio_params(data)
    p.args = ["--config", str(cfg), *p.args]
    return p


async def run(client: Client, code: str, **extra) -> dict:
    answer = await client.call_tool("execute_code", {"code": code, "timeout_seconds": 120, **extra})
    body = answer.structured_content
    assert body is not None, answer.content[0].text
    return body


# openpyxl is pure Python, msgpack a compiled extension: on-demand layers carry both kinds.
DECLARED = {"packages": ["numpy", "pandas"], "on_demand": "allowlist", "allowed_packages": ["openpyxl", "msgpack"]}

GROUPBY = """
import pandas as pd, numpy as np
df = pd.read_csv("sales.csv")
totals = df.groupby("region")["amount"].sum()
result = {"totals": {k: int(v) for k, v in totals.items()}, "pandas_from": pd.__file__, "numpy": np.__version__}
"""


async def test_declared_packages_serve_a_groupby_on_a_workspace_csv(pkg_data: Path, tmp_path: Path):
    cfg = config(tmp_path, "declared", **DECLARED)
    async with Client(params(pkg_data, cfg)) as client:
        await client.call_tool(
            "write_workspace_file",
            {"filename": "sales.csv", "content": "region,amount\nnorth,10\nsouth,5\nnorth,7\neast,1\nsouth,2\n"},
        )
        body = await run(client, GROUPBY)
        assert body["success"], body
        assert body["result"]["totals"] == {"east": 1, "north": 17, "south": 7}
        # From the environment the host built, bound read-only, not from the host's Python.
        assert body["result"]["pandas_from"].startswith("/opt/packages/env/pandas/"), body["result"]
        stats = (await client.call_tool("get_execution_stats", {})).structured_content
        pk = stats["sandbox"]["packages"]
        assert pk["state"] == "ready" and pk["declared"] == ["numpy", "pandas"], pk
        assert pk["installed"] >= 2


async def test_the_environment_is_read_only_from_inside(pkg_data: Path, tmp_path: Path):
    cfg = config(tmp_path, "declared", **DECLARED)
    code = """
import errno, os, pandas
out = {}
for path in [os.path.join(os.path.dirname(pandas.__file__), "__init__.py"), "/opt/packages/env/evil.pth",
             "/opt/packages/layers/evil.pth"]:
    try:
        with open(path, "a") as f:
            f.write("import os; os.system('id')\\n")
        out[path] = "written"
    except OSError as e:
        out[path] = errno.errorcode.get(e.errno, str(e.errno))
try:
    out["list_layers"] = os.listdir("/opt/packages/layers")
except OSError as e:
    out["list_layers"] = errno.errorcode.get(e.errno, str(e.errno))
try:
    os.unlink(pandas.__file__)
    out["unlink"] = "removed"
except OSError as e:
    out["unlink"] = errno.errorcode.get(e.errno, str(e.errno))
result = out
"""
    async with Client(params(pkg_data, cfg)) as client:
        body = await run(client, code)
    assert body["success"], body
    listed = body["result"].pop("list_layers")
    if os.geteuid() == 0:
        # The sandbox runs as its own uid: it may enter the layers it is
        # given, not list what others installed.
        assert listed == "EACCES", listed
    for path, outcome in body["result"].items():
        assert outcome in ("EROFS", "EACCES", "EPERM"), (path, outcome)


async def test_on_demand_installs_reuse_the_cache_and_the_network_stays_closed(pkg_data: Path, tmp_path: Path):
    cfg = config(tmp_path, "declared", **DECLARED)
    probe = """
import socket
def net():
    try:
        socket.create_connection(("1.1.1.1", 443), timeout=3).close()
        return "open"
    except OSError as e:
        return type(e).__name__
"""
    first_code = probe + """
before = net()
installed = install("openpyxl", "msgpack")
after = net()
import openpyxl, msgpack, msgpack._cmsgpack, pandas as pd
pd.DataFrame({"a": [1, 2]}).to_excel("out.xlsx", index=False)
result = {"before": before, "after": after, "installed": installed,
          "read_back": pd.read_excel("out.xlsx")["a"].tolist(),
          "packed": list(msgpack.unpackb(msgpack.packb([1, "x"]))), "compiled": msgpack._cmsgpack.__file__}
"""
    async with Client(params(pkg_data, cfg)) as client:
        first = await run(client, first_code)
    assert first["success"], first
    r = first["result"]
    assert r["before"] != "open" and r["after"] != "open", r
    assert any(p.startswith("openpyxl==") for p in r["installed"]), r
    assert r["read_back"] == [1, 2]
    assert r["packed"] == [1, "x"] and r["compiled"].endswith(".so"), r
    assert first["packages"]["from_cache"] is False
    assert first["packages"]["waited_ms"] > 0
    assert any(p.startswith("openpyxl==") for p in first["packages"]["installed"])

    # Another client, another session: the same request is served from the
    # layer already built (no installer runs), through execute_code's argument.
    async with Client(params(pkg_data, cfg)) as client:
        second = await run(client, "import openpyxl, msgpack\nresult = openpyxl.__version__",
                           requirements=["msgpack", "openpyxl"])
        assert second["success"], second
        assert second["packages"]["from_cache"] is True, second["packages"]
        # A session keeps what it installed across calls.
        sess = await run(client, probe + "install(['openpyxl', 'msgpack'])\nresult = net()", session_id="s1")
        assert sess["success"] and sess["result"] != "open", sess
        again = await run(client, "import openpyxl\nresult = 'ok'", session_id="s1")
        assert again["result"] == "ok", again


async def test_refusals_name_the_package_and_the_config_key(pkg_data: Path, tmp_path: Path):
    cfg = config(tmp_path, "declared", **DECLARED)
    async with Client(params(pkg_data, cfg)) as client:
        body = await run(client, "install('requests')")
        assert not body["success"]
        assert body["error"].startswith("InstallError: requests may not be installed on demand"), body["error"]
        assert "sandbox.allowed_packages" in body["error"]
        answer = await client.call_tool("execute_code", {"code": "pass", "requirements": ["requests"]})
        assert answer.is_error
        assert "sandbox.allowed_packages" in answer.content[0].text
        bad = await client.call_tool("execute_code", {"code": "pass", "requirements": ["x @ https://example.invalid/x.whl"]})
        assert bad.is_error and "not a package requirement" in bad.content[0].text
        # A missing module gets advice: what may be asked for, or which key would allow it.
        missing = await run(client, "import sklearn")
        assert missing["error"] == "ModuleNotFoundError: No module named 'sklearn'"
        assert "scikit-learn is not in sandbox.allowed_packages" in missing["note"], missing["note"]
        allowed = await run(client, "import openpyxl", reset_session=True, session_id="fresh")
        assert not allowed["success"]
        assert 'install("openpyxl")' in allowed["note"], allowed["note"]

    any_cfg = config(tmp_path, "any", on_demand="any")
    async with Client(params(pkg_data, any_cfg)) as client:
        body = await run(client, "install('docopt')")
        assert not body["success"]
        assert "docopt is only published as source code" in body["error"], body["error"]
        assert "allow_source_builds" in body["error"]


async def test_a_failed_rebuild_keeps_the_previous_environment(pkg_data: Path, tmp_path: Path):
    broken = config(tmp_path, "broken", packages=["numpy", "pandas", "no-such-package-cem-7f3a"])
    async with Client(params(pkg_data, broken)) as client:
        body = await run(client, "import pandas\nresult = pandas.__file__")
    assert body["success"], body
    assert body["result"].startswith("/opt/packages/env/"), body
    assert "no-such-package-cem-7f3a" in body["warning"] and "previous environment" in body["warning"], body


def test_packages_cli_lists_explains_and_syncs(pkg_data: Path, tmp_path: Path):
    cfg = config(tmp_path, "declared", **DECLARED)
    base = ["--config", str(cfg), "--data-dir", str(pkg_data)]
    out = run_cli(*base, "packages", "sync", timeout=300)
    assert out.returncode == 0, out.stderr
    assert "already built" in out.stdout or "built in" in out.stdout, out.stdout
    listed = run_cli(*base, "packages", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    info = json.loads(listed.stdout)
    names = {p["name"] for p in info["environment"]["packages"]}
    assert {"numpy", "pandas"} <= names, names
    assert info["state"] == "ready" and info["allowed_packages"] == ["openpyxl", "msgpack"]
    why = run_cli(*base, "packages", "why", "NumPy")
    assert why.returncode == 0, why.stderr
    assert "pandas -> numpy" in why.stdout and "(declared numpy, pandas)" in why.stdout, why.stdout
    nope = run_cli(*base, "packages", "why", "requests")
    assert nope.returncode == 1 and "requests is not installed" in nope.stderr
    doctor = run_cli(*base, "doctor")
    line = next(l for l in doctor.stdout.splitlines() if "packages" in l.split()[1:2])
    assert line.startswith("ok") and "ready" in line and "uv" in line, line

    broken = config(tmp_path, "broken", packages=["no-such-package-cem-7f3a"])
    failed = run_cli("--config", str(broken), "--data-dir", str(pkg_data), "packages", "sync", timeout=300)
    assert failed.returncode == 1
    assert "no-such-package-cem-7f3a" in failed.stderr, failed.stderr


def test_packages_sync_fetches_uv_when_the_host_has_none(tmp_path: Path):
    """No sandbox.installer and no uv on PATH: the first sync fetches the pinned uv with the host's pip (its
    wheel's digest checked) into the data directory, builds with it, and doctor names it; the next sync finds it."""
    data = tmp_path / "data"
    cfg = tmp_path / "no-uv.json"
    cfg.write_text(json.dumps({"mcpServers": {}, "sandbox": {"packages": ["six"], "pool_size": 1}}))
    # A PATH with no uv on it (scripts/test's virtualenvs and ~/.local/bin left out).
    env = {"PATH": "/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"}
    assert all(not (Path(d) / "uv").exists() for d in env["PATH"].split(":"))
    base = ["--config", str(cfg), "--data-dir", str(data)]
    before = run_cli(*base, "doctor", env=env)
    line = next(l for l in before.stdout.splitlines() if "packages" in l.split()[1:2])
    assert "no uv on this host" in line and "fetches uv" in line, line
    out = run_cli(*base, "packages", "sync", env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    fetched = next((data / "tools").glob("uv-*/uv"))
    assert os.access(fetched, os.X_OK)
    listed = json.loads(run_cli(*base, "packages", "list", "--json", env=env).stdout)
    assert "six" in {p["name"] for p in listed["environment"]["packages"]}, listed
    after = run_cli(*base, "doctor", env=env)
    line = next(l for l in after.stdout.splitlines() if "packages" in l.split()[1:2])
    assert f"(fetched into {fetched})" in line, line
    again = run_cli(*base, "packages", "sync", env=env, timeout=120)
    assert again.returncode == 0 and "already built" in again.stdout, again.stdout + again.stderr
