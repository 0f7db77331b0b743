"""An upstream server cannot take the others down with what it sends (issue 57, items 3 and 7).

Real binary over HTTP, our hostile server (tests/integration/servers/hostile_server.py) beside an ordinary one
(the same script with nothing hostile set). Each test fails on the build before the caps: an endless tool list was
paged until the timeout while the server grew by gigabytes, every list_changed notice dropped every catalog, and
stderr went to the log unbounded.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from conftest import start_http
from stateless import Stateless, proc_status

HOSTILE = str(Path(__file__).parent / "servers" / "hostile_server.py")
TOKENS = {"alice": "alice-token-0123456789abcdef"}


def serve(tmp_path: Path, hostile_env: dict, upstream: dict | None = None):
    data = tmp_path / "data"
    data.mkdir()
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "mcpServers": {
            "hostile": {"command": "/usr/bin/python3", "args": [HOSTILE], "env": hostile_env},
            "plain": {"command": "/usr/bin/python3", "args": [HOSTILE]},
        },
        "auth": {"tokens": TOKENS},
        **({"upstream": upstream} if upstream else {}),
    }))
    server = start_http(data, config=config)
    return server, Stateless(server.url, TOKENS["alice"])


def categories(client: Stateless) -> dict:
    return {c["name"]: c for c in client.call("list_tool_categories", {})["categories"]}


def test_an_endless_tool_list_is_refused_at_a_cap_and_the_others_are_served(tmp_path: Path):
    server, alice = serve(tmp_path, {"HOSTILE_PAGES": "endless", "HOSTILE_PAGE_SIZE": "2000",
                                     "HOSTILE_DESCRIPTION_BYTES": "400"})
    try:
        found = alice.call("search_tools", {"query": "echo its name", "category": "plain", "detail_level": "name"})
        assert "plain.echo" in found["tools"], found
        by_name = categories(alice)
        hostile = by_name["hostile"]
        assert hostile["state"] == "failed" and "upstream.max_tools" in hostile["error"], hostile
        assert hostile["tools"] == 0, hostile
        # The listing stopped at the cap: a few pages of tools, not the 60 s of paging before.
        assert proc_status(server.proc.pid)["VmHWM"] < 400_000, proc_status(server.proc.pid)
        # And code still calls the ordinary server.
        ran = alice.call("execute_code", {"code": "result = call_tool('plain.echo', {'text': 'hi'})"})
        assert ran["success"], ran
    finally:
        server.stop()


CAPS = [
    ({"HOSTILE_PAGES": "endless", "HOSTILE_PAGE_SIZE": "1"}, {"max_list_pages": 5}, "upstream.max_list_pages"),
    ({"HOSTILE_PAGES": "3", "HOSTILE_PAGE_SIZE": "10", "HOSTILE_DESCRIPTION_BYTES": "1000"},
     {"max_list_bytes": 20000}, "upstream.max_list_bytes"),
]


def test_each_cap_names_its_key(tmp_path: Path):
    for i, (env, upstream, key) in enumerate(CAPS):
        run_dir = tmp_path / str(i)
        run_dir.mkdir()
        server, alice = serve(run_dir, env, upstream)
        try:
            hostile = categories(alice)["hostile"]
            assert hostile["state"] == "failed" and key in hostile["error"], hostile
        finally:
            server.stop()


def test_a_server_that_keeps_announcing_changes_is_listed_again_at_most_once_an_interval(tmp_path: Path):
    # Ten notices a second, each listing different (a new gen_<n> tool every time): before, each notice dropped the
    # catalog and the next search rebuilt it. Now the server is listed again at once, then at most once an interval
    # (1 s here), twice as long each time while it keeps changing; the catalog is rebuilt beside the one served.
    server, alice = serve(tmp_path, {"HOSTILE_LIST_CHANGED_HZ": "10", "HOSTILE_CHANGING": "1"},
                          {"list_changed_interval_seconds": 1})
    try:
        first = alice.call("search_tools", {"query": "echo its name", "category": "plain", "detail_level": "name"})
        assert "plain.echo" in first["tools"], first
        started = time.monotonic()
        answers = 0
        while time.monotonic() - started < 8:
            found = alice.call("search_tools", {"query": "echo its name", "category": "plain", "detail_level": "name"})
            assert "plain.echo" in found["tools"], found
            answers += 1
            time.sleep(0.1)
        log = server.log_text()
        rebuilds = log.count("the catalog is rebuilt beside the current one")
        # Listed again at 0, 1, 3 and 7 s after the first notice (the wait doubling), with a margin for a slow
        # machine; before: one rebuild per search, some sixty or more.
        assert 1 <= rebuilds <= 6, (rebuilds, answers)
        assert "keeps saying its tools changed" in log
        # The changed server's new tools reach the catalog.
        gens = alice.call("search_tools", {"query": "changes with every listing", "category": "hostile",
                                           "detail_level": "name"})
        assert any(t.startswith("hostile.gen_") for t in gens["tools"]), gens
    finally:
        server.stop()


def test_an_upstreams_stderr_reaches_the_log_within_its_budget(tmp_path: Path):
    server, alice = serve(tmp_path, {"HOSTILE_STDERR_BYTES": str(30 << 20)},
                          {"stderr_max_bytes": 1 << 20, "stderr_lines_per_second": 100000})
    try:
        # The flood is written at start; code makes it write more, through a tool that logs.
        ran = alice.call("execute_code", {"code": "result = call_tool('hostile.shout', {'bytes': 20000000})",
                                          "timeout_seconds": 60})
        assert ran["success"], ran
        again = alice.call("execute_code", {"code": "result = call_tool('hostile.echo', {})"})
        assert again["success"], again
        size = server.log.stat().st_size
        # 30 MB + 20 MB written; the log holds the 1 MiB budget and its own lines.
        assert size < 3 << 20, size
        assert "upstream.stderr_max_bytes" in server.log_text()
    finally:
        server.stop()
