"""`--log-format json`: one JSON object a line, each line of a request carrying its request id, the tenant as a
digest (never the person's name) and the node."""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import start_http
from stateless import Stateless

TOKEN = "alice-json-logs-token-0123456789"


def test_json_lines_carry_the_request_tenant_digest_and_node(tmp_path: Path):
    data = tmp_path / "data"
    data.mkdir()
    config = tmp_path / "mcp_config.json"
    config.write_text(json.dumps({"auth": {"tokens": {"alice.liddell": TOKEN}}}))
    server = start_http(data, config=config, env={"CODE_EXECUTION_MCP_LOG_FORMAT": "json",
                                                  "CODE_EXECUTION_MCP_LOG": "debug"})
    try:
        alice = Stateless(server.url, TOKEN)
        assert alice.call("execute_code", {"code": "result = 6 * 7"})["result"] == 42
        assert alice.call("write_workspace_file", {"filename": "a.txt", "content": "x"})["success"]
    finally:
        server.stop()
    lines = [line for line in server.log_text().splitlines() if line.startswith("{")]
    assert lines, server.log_text()
    records = [json.loads(line) for line in lines]
    assert all({"timestamp", "level", "message"} <= r.keys() for r in records), records[:3]
    calls = [r for r in records if r["message"] == "tool call"]
    assert {r["tool"] for r in calls} == {"execute_code", "write_workspace_file"}, calls
    requests = [next(s for s in r["spans"] if s["name"] == "request") for r in calls]
    assert len({s["request"] for s in requests}) == 2, requests
    for span in requests:
        assert re.fullmatch(r"[0-9a-f]{12}", span["tenant"]), span
        assert span["node"], span
    assert len({s["tenant"] for s in requests}) == 1
    # The person is named by digest only, and the token never.
    text = server.log_text()
    assert "alice.liddell" not in text and TOKEN not in text, text
