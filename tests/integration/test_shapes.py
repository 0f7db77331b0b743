"""Result shapes learned from use and from safe probes, over the Python SDK as client, with real servers
(mcp-server-git, server-everything) and a records server whose results are full of personal data."""

from __future__ import annotations

import json
import time
from pathlib import Path

import jsonschema
import pytest
from mcp import Client

from conftest import SDK1_PYTHON, SERVERS_PYTHON, run_cli, stdio_params

pytestmark = pytest.mark.anyio

RECORDS = str(Path(__file__).parent / "servers" / "records_server.py")
EVERYTHING = str(Path(__file__).resolve().parents[1] / "js" / "node_modules" / "@modelcontextprotocol"
                 / "server-everything" / "dist" / "index.js")
# Every value of the records server that is personal data or an identifier: none may be kept.
PERSONAL = ["Margarethe", "Oyelaran", "Thaddeus", "Kowalczyk", "Ingrid", "Abernathy", "example.org",
            "example.net", "example.com", "415 555", "7946", "901820", "INV-", "SKU", "SPRING", "40000000",
            "40000001", "billing.example", "2026-01-1"]


@pytest.fixture
def anyio_backend():
    return "asyncio"


def config_for(tmp_path: Path, **extra) -> Path:
    config = tmp_path / "mcp_config.json"
    config.write_text(json.dumps({"mcpServers": {
        "records": {"command": str(SDK1_PYTHON), "args": [RECORDS]},
        "git": {"command": str(SERVERS_PYTHON), "args": ["-m", "mcp_server_git"]},
        "everything": {"command": "node", "args": [EVERYTHING, "stdio"]},
    }, **extra}))
    return config


def client_for(data_dir: Path, config: Path) -> Client:
    params = stdio_params(data_dir)
    params.args = ["--config", str(config), *params.args]
    return Client(params)


async def call(client: Client, tool: str, args: dict) -> dict:
    answer = await client.call_tool(tool, args)
    return {"is_error": answer.is_error, **answer.structured_content}


async def run(client: Client, code: str) -> dict:
    answer = await call(client, "execute_code", {"code": code})
    assert answer["success"], answer
    return answer


async def until(check, what: str, timeout: float = 20):
    deadline = time.monotonic() + timeout
    while True:
        found = await check()
        if found:
            return found
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s"
        time.sleep(0.2)


def everything_stored(data_dir: Path) -> str:
    """Every learned shape, wrapper and stub on disk, as one text."""
    texts = [p.read_text(errors="replace") for p in (data_dir / "shapes").rglob("*") if p.is_file()]
    texts += [p.read_text(errors="replace") for p in (data_dir / "servers").rglob("*.py*") if p.is_file()]
    return "\n".join(texts)


async def test_a_shape_learned_from_one_call_types_every_view_and_keeps_no_personal_data(
        data_dir: Path, tmp_path: Path):
    async with client_for(data_dir, config_for(tmp_path)) as client:
        before = await call(client, "get_tool_definition", {"tool_name": "records.invoices"})
        assert before["python"]["signature"].endswith("-> Any") and "returns" not in before, before

        first = await run(client, "from servers.records import invoices\nresult = sorted(invoices(customer=0))")
        assert first["result"] == ["balances_by_account", "contacts_by_email", "customer_name", "invoices", "portal"]

        async def learned():
            d = await call(client, "get_tool_definition", {"tool_name": "records.invoices", "schemas": True})
            return d if "returns" in d else None

        d = await until(learned, "the definition's learned return type")
        assert d["returns"] == {"source": "learned", "calls": 1, "probes": 0}, d
        signature, types = d["python"]["signature"], d["python"]["types"]
        assert not signature.endswith("-> Any"), signature
        namespace: dict = {}
        exec("from typing import Any, Literal, NotRequired, TypedDict\n" + types, namespace)
        result_type = namespace[signature.rsplit("-> ", 1)[1].strip(": ")]
        assert result_type.__required_keys__ == {"customer_name", "invoices", "contacts_by_email",
                                                 "balances_by_account", "portal"}
        # Keys that are data (emails, account numbers) became maps: dict[str, ...], their keys not kept.
        hints = result_type.__annotations__
        assert str(hints["contacts_by_email"]).startswith("dict[str, "), hints
        assert str(hints["balances_by_account"]).startswith("dict[str, "), hints
        schema = d["output_schema"]
        invoice = schema["properties"]["invoices"]["items"]
        assert set(invoice["required"]) == {"invoice_id", "issued_at", "amount_due", "paid", "billing_contact", "lines"}
        assert "discount_code" in invoice["properties"] and "discount_code" not in invoice["required"]
        assert invoice["properties"]["issued_at"].get("format") == "date-time", invoice
        assert schema["properties"]["portal"].get("format") == "uri", schema

        # Further calls with other arguments validate against what one call taught.
        answer = await run(client, "from servers.records import invoices\n"
                                   "result = [invoices(customer=c) for c in range(1, 7)]")
        shape = {k: v for k, v in schema.items() if k != "x-cem-shape"}
        for value in answer["result"]:
            jsonschema.validate(value, shape)

        # The wrapper and its stub, which code imports, carry the type; the field names are search words.
        async def typed_wrapper():
            text = (data_dir / "servers" / "records" / "invoices.pyi").read_text()
            return "amount_due" in text and not text.count("-> Any")

        await until(typed_wrapper, "the wrapper's return type")

        async def found_by_field():
            hit = await call(client, "search_tools", {"query": "sku quantity", "detail_level": "full", "limit": 3})
            return hit if hit["tools"] and hit["tools"][0]["name"] == "invoices" else None

        hit = await until(found_by_field, "a search by the result's field names")
        assert hit["tools"][0]["returns"]["source"] == "learned"
        assert hit["tools"][0]["output_schema"]["x-cem-shape"]["calls"] == 7

        # Nothing personal anywhere a shape went: stored shapes, wrappers, stubs, definitions, searches.
        shown = everything_stored(data_dir) + json.dumps([d, hit])
        for value in PERSONAL:
            assert value not in shown, value

        # A declared outputSchema the result breaks is said to the code, and the value passed on as it came.
        drift = await run(client, "import warnings\nwith warnings.catch_warnings(record=True) as seen:\n"
                                  "    warnings.simplefilter('always')\n"
                                  "    value = call_tool('records.wrong_total', {})\n"
                                  "result = [value, [(w.category.__name__, str(w.message)) for w in seen]]")
        value, seen = drift["result"]
        assert value == {"total": 3}
        assert [kind for kind, _ in seen] == ["ToolResultWarning"], seen
        assert "$.total: expected string, got integer" in seen[0][1], seen
        # A tool with a declared schema learns nothing.
        assert "records.wrong_total" not in (data_dir / "shapes" / "learned.json").read_text()

        # tools shapes lists what was learned and forgets it; the server reads the clear back.
        listed = run_cli("--data-dir", str(data_dir), "--config", str(tmp_path / "mcp_config.json"),
                         "--log-level", "error", "tools", "shapes", "--json")
        assert listed.returncode == 0, listed.stderr
        rows = [json.loads(line) for line in listed.stdout.splitlines()]
        assert [(r["tool"], r["calls"], r["widened"]) for r in rows] == [("records.invoices", 7, 0)], rows
        time.sleep(1.1)  # file times are coarse on some file systems
        cleared = run_cli("--data-dir", str(data_dir), "--config", str(tmp_path / "mcp_config.json"),
                          "--log-level", "error", "tools", "shapes", "--clear", "--server", "records")
        assert cleared.stdout.strip() == "forgot 1 shape(s)", cleared

        async def forgotten():
            d = await call(client, "get_tool_definition", {"tool_name": "records.invoices"})
            return d if "returns" not in d else None

        forgot = await until(forgotten, "the definition forgetting its learned type")
        assert forgot["python"]["signature"].endswith("-> Any"), forgot


async def test_a_result_that_does_not_fit_widens_the_shape_and_the_count_says_so(data_dir: Path, tmp_path: Path):
    async with client_for(data_dir, config_for(tmp_path)) as client:
        # everything's echo answers text; get-env an object keyed by variable names.
        await run(client, "from servers.everything import echo\nresult = echo(message='hi')")
        await run(client, "result = call_tool('everything.get-sum', {'a': 1, 'b': 2})")
        d = await until(lambda: _returns(client, "everything.echo"), "echo's learned type")
        assert d["python"]["signature"].endswith("-> str"), d
        shapes = json.loads((data_dir / "shapes" / "learned.json").read_text())["tools"]
        assert shapes["everything.echo"]["widened"] == 0 and shapes["everything.echo"]["calls"] == 1
        # A git tool's text result is a string too; a git call that fails learns nothing.
        await run(client, "try:\n    call_tool('git.git_status', {'repo_path': '/nonexistent'})\n"
                          "except ToolError as e:\n    result = 'failed'")
        assert "git.git_status" not in (data_dir / "shapes" / "learned.json").read_text()


async def _returns(client: Client, tool: str):
    d = await call(client, "get_tool_definition", {"tool_name": tool})
    return d if "returns" in d else None


def test_discover_calls_only_safe_tools_and_says_why_it_skipped_the_rest(data_dir: Path, tmp_path: Path):
    config = config_for(tmp_path, policy={"rules": {"git.git_log": "deny", "git.git_status": "ask"}})
    repo = tmp_path / "repo"
    repo.mkdir()
    import subprocess
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    out = run_cli("--data-dir", str(data_dir), "--config", str(config), "--log-level", "error",
                  "tools", "discover", "records", "git", "--arg", f"repo_path={repo}", "--json", timeout=120)
    assert out.returncode == 0, out.stderr
    probes = {p["tool"]: p for p in map(json.loads, out.stdout.splitlines())}
    # Read-only, no declared schema, allowed; only required arguments are built (customer has a default).
    assert probes["records.invoices"] == {"outcome": "called", "tool": "records.invoices", "arguments": {}}
    assert "declares an outputSchema" in probes["records.wrong_total"]["reason"]
    assert "not read-only" in probes["git.git_commit"]["reason"]
    assert "not read-only" in probes["git.git_reset"]["reason"]
    assert probes["git.git_log"]["outcome"] == "skipped" and "denies" in probes["git.git_log"]["reason"]
    assert probes["git.git_status"]["outcome"] == "skipped" and "asks a person" in probes["git.git_status"]["reason"]
    assert "cannot build 'revision'" in probes["git.git_show"]["reason"]
    assert probes["git.git_diff_unstaged"]["outcome"] == "called", probes["git.git_diff_unstaged"]
    # Nothing that changes anything was called: the audit log has only what was called.
    audited = {json.loads(line).get("tool") for line in (data_dir / "audit" / "audit.jsonl").read_text().splitlines()}
    called = {t for t, p in probes.items() if p["outcome"] != "skipped"}
    assert audited <= called | {None}, (audited, called)
    shown = run_cli("--data-dir", str(data_dir), "--config", str(config), "--log-level", "error",
                    "tools", "show", "records.invoices", timeout=60)
    definition = json.loads(shown.stdout)
    assert definition["returns"] == {"source": "probed", "calls": 0, "probes": 1}, definition
    for value in PERSONAL:
        assert value not in everything_stored(data_dir) + shown.stdout, value
