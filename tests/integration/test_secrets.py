"""Config secrets stay on the host: a value from `${VAR}`, an upstream's env and headers, a token in a URL never
show up in anything the model, the code, the log, the audit file or `doctor` gets, whichever way they travel
(an upstream's error quoting its command line, a connection error quoting its URL, a tool printing its own
environment)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_cli, start_http
from stateless import Stateless
from test_upstream import EVERYTHING

# Each would be recognisable anywhere: no other text has them.
KEY = "sk_live_Zq81vLm0Pq3RtW7yXb5NcD2f"       # an API key, in an upstream's env
CMD = "cmdsecret7f3a9d2e"                      # in a command line that cannot start
URLTOKEN = "urltok91b2c3d4e5f6"                # in a URL's query
PASSWORD = "pw0rd-8c1e7b"                       # a URL's password
HEADER = "hdr-bearer-5d4c3b2a19"              # a header value
SECRETS = [KEY, CMD, URLTOKEN, PASSWORD, HEADER]
ENV = {"CEM_T_KEY": KEY, "CEM_T_CMD": CMD, "CEM_T_URLTOKEN": URLTOKEN, "CEM_T_PASSWORD": PASSWORD,
       "CEM_T_HEADER": HEADER}


def config(tmp_path: Path, pii_mode: str = "auto") -> Path:
    path = tmp_path / "mcp_config.json"
    path.write_text(json.dumps({
        "mcpServers": {
            "everything": {"command": "node", "args": [EVERYTHING, "stdio"],
                           "env": {"SERVICE_API_KEY": "${CEM_T_KEY}"}},
            # Cannot start: the error quotes the command line.
            "broken": {"command": "/nonexistent/bin-${CEM_T_CMD}", "args": ["--token", "${CEM_T_CMD}"]},
            # Cannot connect: the error may quote the URL.
            "remote": {"type": "http", "url": "http://user:${CEM_T_PASSWORD}@127.0.0.1:9/mcp?token=${CEM_T_URLTOKEN}",
                       "headers": {"Authorization": "Bearer ${CEM_T_HEADER}"}},
        },
        "pii": {"mode": pii_mode},
    }))
    return path


CODE = """
out = {}
out["env"] = call_tool("everything.get-env", {})
for tool in ("broken.anything", "remote.anything"):
    try:
        call_tool(tool, {})
    except Exception as e:
        out[tool] = f"{type(e).__name__}: {e}"
print(out)
result = out
"""


def leaks(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


def test_no_surface_shows_a_config_secret(data_dir: Path, tmp_path: Path):
    cfg = config(tmp_path)
    server = start_http(data_dir, "--log-level", "debug", env=ENV, config=cfg)
    try:
        client = Stateless(server.url)
        seen = {}
        answer = client.call("execute_code", {"code": CODE, "timeout_seconds": 60})
        assert answer["success"], answer
        # The tool ran and the code got its answer: the key's place is marked, not the key.
        env = answer["result"]["env"]
        assert "SERVICE_API_KEY" in json.dumps(env) and "[redacted]" in json.dumps(env), env
        # Each failure is still explained, by server name.
        assert "broken" in answer["result"]["broken.anything"], answer
        assert "remote" in answer["result"]["remote.anything"], answer
        seen["execute_code"] = answer
        # What the code can do with what it got: nothing of the secret is left to restore.
        restore = client.call("execute_code", {"code": "import re\nresult = [tokenize_pii(str(v))[1] for v in "
                                                        "[call_tool('everything.get-env', {})]]"})
        seen["tokenize in code"] = restore
        for tool, args in [("list_tool_categories", {}), ("search_tools", {"query": "environment variables"}),
                           ("search_tools", {"query": "anything", "detail_level": "full"}),
                           ("get_execution_stats", {}), ("get_tool_definition", {"tool_name": "everything.get-env"})]:
            seen[tool] = client.result(tool, args)
        for surface, value in seen.items():
            assert not leaks(json.dumps(value)), (surface, leaks(json.dumps(value)), value)
    finally:
        server.stop()
    log = server.log_text()
    # The log did see the failures (so it was looked at), never the values.
    assert "broken" in log and not leaks(log), leaks(log)
    audit = (data_dir / "audit" / "audit.jsonl").read_text()
    assert "everything" in audit and not leaks(audit), leaks(audit)
    doctor = run_cli("--data-dir", str(data_dir), "--config", str(cfg), "doctor", "--json", env=ENV, timeout=120)
    assert "broken" in doctor.stdout and not leaks(doctor.stdout + doctor.stderr), doctor.stdout


def test_manual_mode_code_gets_no_secret_to_restore(data_dir: Path, tmp_path: Path):
    """In manual mode code may restore its session's tokens: a config secret must never have been one."""
    cfg = config(tmp_path, pii_mode="manual")
    server = start_http(data_dir, env=ENV, config=cfg)
    try:
        code = CODE + "result = detokenize_pii(str(out))\n"
        answer = Stateless(server.url).call("execute_code", {"code": code, "timeout_seconds": 60})
        assert answer["success"], answer
        assert "[redacted]" in answer["result"] and not leaks(json.dumps(answer)), answer
    finally:
        server.stop()
