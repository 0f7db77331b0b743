"""The command line: config lookup and errors, doctor, exit codes."""

from __future__ import annotations

import json
import os
from pathlib import Path

from conftest import run_cli


def test_invalid_config_names_the_key_and_exits_non_zero(tmp_path: Path, data_dir: Path):
    cfg = tmp_path / "mcp_config.json"
    cfg.write_text(json.dumps({"mcpServers": {"git": {"type": "stdio", "args": ["mcp-server-git"]}},
                               "sandbox": {"memory_mb": "lots"}}))
    out = run_cli("--config", str(cfg), "--data-dir", str(data_dir), "serve")
    assert out.returncode == 2
    assert 'mcpServers.git: a stdio server needs "command"' in out.stderr
    assert "sandbox.memory_mb: expected a whole number of megabytes" in out.stderr
    assert out.stdout == ""


def test_json_syntax_error_gives_line_and_column(tmp_path: Path, data_dir: Path):
    cfg = tmp_path / "c.json"
    cfg.write_text('{\n  "mcpServers": {,}\n}')
    out = run_cli("--config", str(cfg), "--data-dir", str(data_dir), "serve")
    assert out.returncode == 2
    assert "line 2" in out.stderr and "not valid JSON" in out.stderr


def test_missing_variable_is_reported(tmp_path: Path, data_dir: Path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"mcpServers": {"gh": {"url": "https://x.example/mcp",
                                                     "headers": {"Authorization": "Bearer ${CEM_TEST_UNSET_TOKEN}"}}}}))
    out = run_cli("--config", str(cfg), "--data-dir", str(data_dir), "doctor")
    assert out.returncode == 1
    assert "mcpServers.gh.headers.Authorization: ${CEM_TEST_UNSET_TOKEN} is not set" in out.stdout
    ok = run_cli("--config", str(cfg), "--data-dir", str(data_dir), "doctor", env={"CEM_TEST_UNSET_TOKEN": "t"})
    assert ok.returncode == 0, ok.stdout


def test_named_config_that_does_not_exist(tmp_path: Path, data_dir: Path):
    out = run_cli("--config", str(tmp_path / "nope.json"), "--data-dir", str(data_dir), "serve")
    assert out.returncode == 2
    assert "does not exist" in out.stderr and "nope.json" in out.stderr


def test_config_is_found_in_the_current_directory(tmp_path: Path, data_dir: Path):
    (tmp_path / "mcp_config.json").write_text(json.dumps({"mcpServers": {"t": {"command": "true"}}}))
    out = run_cli("--data-dir", str(data_dir), "doctor", "--json", cwd=tmp_path)
    report = json.loads(out.stdout)
    config = next(c for c in report["checks"] if c["check"] == "config")
    assert config["status"] == "ok"
    assert str(tmp_path / "mcp_config.json") in config["detail"]
    assert "current directory" in config["detail"]


def test_doctor_names_the_opt_in_transformer_while_the_built_in_model_ranks(tmp_path: Path, data_dir: Path):
    (tmp_path / "mcp_config.json").write_text(json.dumps({"mcpServers": {}}))
    out = run_cli("--data-dir", str(data_dir), "doctor", "--json", cwd=tmp_path)
    search = next(c for c in json.loads(out.stdout)["checks"] if c["check"] == "search")
    assert search["status"] == "ok", search
    assert "by words and meaning (model minilm-l6-v2-static-" in search["detail"], search
    assert "tools transformer DIR" in search["detail"], search


def test_config_from_environment_variable(tmp_path: Path, data_dir: Path):
    cfg = tmp_path / "elsewhere.json"
    cfg.write_text("{}")
    out = run_cli("--data-dir", str(data_dir), "doctor", env={"CODE_EXECUTION_MCP_CONFIG": str(cfg)})
    assert out.returncode == 0
    assert str(cfg) in out.stdout


def test_no_config_is_fine(tmp_path: Path, data_dir: Path):
    out = run_cli("--data-dir", str(data_dir), "doctor", cwd=tmp_path, env={"XDG_CONFIG_HOME": str(tmp_path / "cfg")})
    assert out.returncode == 0, out.stdout
    assert "no config file" in out.stdout


def test_doctor_reports_python_and_data_dir(tmp_path: Path, data_dir: Path):
    out = run_cli("--data-dir", str(data_dir), "doctor", "--json", cwd=tmp_path)
    report = json.loads(out.stdout)
    by_name = {c["check"]: c for c in report["checks"]}
    assert report["ok"] is True
    assert by_name["python"]["status"] == "ok" and "Python 3" in by_name["python"]["detail"]
    assert by_name["data dir"]["status"] == "ok"
    # The probe starts a real sandboxed interpreter; on this host every layer is on.
    for layer in ["namespaces", "unprivileged uid", "minimal root", "network off", "landlock", "seccomp", "no_new_privs"]:
        assert by_name[layer]["status"] == "ok", (layer, by_name[layer])


def _doctor_check(tmp_path: Path, data_dir: Path, config: dict, check: str) -> dict:
    """One check of `doctor --json` run with `config`."""
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps(config))
    out = run_cli("--config", str(cfg), "--data-dir", str(data_dir), "doctor", "--json", cwd=tmp_path)
    return {c["check"]: c for c in json.loads(out.stdout)["checks"]}[check]


def test_doctor_says_how_tenants_share_the_cpu(tmp_path: Path, data_dir: Path):
    cpu = _doctor_check(tmp_path, data_dir, {"sandbox": {"tenant_cpu_percent": 40}}, "cpu")
    # This host has the cgroup v1 cpu controller: each tenant's group and its limit.
    assert cpu["status"] == "ok", cpu
    assert f"at most 40% of this host's {os.cpu_count()} cores" in cpu["detail"], cpu
    assert "sandbox.tenant_cpu_percent" in cpu["detail"], cpu


def test_doctor_says_whether_tenants_writes_are_held_to_a_rate(tmp_path: Path, data_dir: Path):
    config = {"sandbox": {"tenant_disk_mb_per_second": 12}, "auth": {"tokens": {"alice": "a" * 32}}}
    rate = _doctor_check(tmp_path, data_dir, config, "disk rate")
    if Path("/sys/fs/cgroup/blkio/blkio.throttle.write_bps_device").exists():
        assert rate["status"] == "ok", rate
        assert "held to 12 MB/s" in rate["detail"] and "blkio.throttle.write_bps_device" in rate["detail"], rate
    else:
        # Tenants to keep apart and no way to: a warning that says why.
        assert rate["status"] == "warn", rate
        assert "cannot be held to a rate" in rate["detail"], rate
    rate = _doctor_check(tmp_path, data_dir, {"sandbox": {"tenant_disk_mb_per_second": 0}}, "disk rate")
    assert rate["status"] == "ok" and "tenant_disk_mb_per_second is 0" in rate["detail"], rate


def test_doctor_fails_on_a_broken_python(tmp_path: Path, data_dir: Path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"sandbox": {"python": "/nonexistent/python3"}}))
    out = run_cli("--config", str(cfg), "--data-dir", str(data_dir), "doctor")
    assert out.returncode == 1
    assert "FAIL  python" in out.stdout and "sandbox.python" in out.stdout


def test_doctor_fails_on_an_unwritable_data_dir(tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("not a dir")
    out = run_cli("--data-dir", str(blocker / "sub"), "doctor")
    assert out.returncode == 1
    assert "FAIL  data dir" in out.stdout


def test_data_dir_from_environment(tmp_path: Path):
    d = tmp_path / "from-env"
    out = run_cli("doctor", env={"CODE_EXECUTION_MCP_DATA_DIR": str(d)}, cwd=tmp_path)
    assert out.returncode == 0
    assert str(d) in out.stdout
