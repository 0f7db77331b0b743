"""The workflows, each done twice: as an agent calling tools directly, and as one writing code.

Rules kept on both sides:
- The direct agent calls tools that exist, with the arguments a model would write, and works
  out its answer only from what the results said (parsed here as the model would read them).
- The code agent makes one search_tools call (detail_level summary), then get_tool_definition
  for each upstream tool its code uses, then (where the data's shape is not given in the task)
  one execute_code that peeks at a small sample, then the execute_code that does the work.
- Both answers must equal the answer computed from the generated data itself.
"""

from __future__ import annotations

import ast
import csv
import io
import json
import re
import shutil
import sqlite3
import subprocess
from collections import Counter
from pathlib import Path

from . import data
from .agents import ALL_SERVERS, CodeAgent, DirectAgent


# The size of the data workflows' data: the issue's own example filters a 10,000-row dataset, so
# every workflow that moves records moves about as many. `bench_tokens.py --sizes` reruns them
# smaller, to show how the reduction depends on the size (code mode's cost barely moves with it).
RECORDS = 10_000


class Workflow:
    key = ""
    title = ""
    servers: list[str] = []
    scalable = False  # takes a number of records (the size sweep reruns it at other sizes)
    records: int | None = None

    def prepare(self, state: Path, seed_memory) -> None:  # builds the state the servers start from
        raise NotImplementedError

    def expected(self):
        raise NotImplementedError

    def direct(self, agent: DirectAgent, state: Path):
        raise NotImplementedError

    def code(self, agent: CodeAgent, state: Path):
        raise NotImplementedError

    def check(self, direct_answer, code_answer, direct_state: Path, code_state: Path, agent_lines: list[str],
              workspace: Path) -> None:
        expected = self.expected()
        assert direct_answer == expected, f"{self.key}: direct answer {direct_answer!r} != expected {expected!r}"
        assert code_answer == expected, f"{self.key}: code answer {code_answer!r} != expected {expected!r}"


def files(state: Path) -> Path:
    d = state / "files"
    d.mkdir(parents=True, exist_ok=True)
    return d


# 1 -------------------------------------------------------------------------------------------

class OrdersSummary(Workflow):
    key = "orders"
    servers = ["filesystem"]
    scalable = True

    def __init__(self, records: int = RECORDS):
        self.records = records
        self.title = f"{records:,}-row JSON file to a summary"
        self.rows = data.orders(n=records)

    def prepare(self, state, seed_memory):
        data.write_json(files(state) / "orders.json", self.rows)

    def expected(self):
        return data.orders_summary(self.rows)

    def direct(self, agent, state):
        text = agent.text("filesystem", "read_text_file", {"path": str(state / "files" / "orders.json")})
        return data.orders_summary(json.loads(text))

    def code(self, agent, state):
        path = str(state / "files" / "orders.json")
        agent.search("read a file", "filesystem.read_text_file", detail_level="summary", limit=5)
        agent.definition("filesystem.read_text_file")
        agent.execute(f"""
raw = call_tool("filesystem.read_text_file", {{"path": {path!r}}})
rows = json.loads(raw["content"] if isinstance(raw, dict) else raw)
result = {{"rows": len(rows), "sample": rows[:2]}}
""")
        body = agent.execute(f"""
from collections import defaultdict
raw = call_tool("filesystem.read_text_file", {{"path": {path!r}}})
rows = json.loads(raw["content"] if isinstance(raw, dict) else raw)
by_region = defaultdict(lambda: {{"orders": 0, "revenue": 0.0}})
by_product = defaultdict(float)
for r in rows:
    if r["status"] == "delivered" and r["date"].startswith("2025-"):
        revenue = r["qty"] * r["unit_price"]
        by_region[r["region"]]["orders"] += 1
        by_region[r["region"]]["revenue"] += revenue
        by_product[r["product"]] += revenue
top = sorted(by_product.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
result = {{
    "by_region": {{k: {{"orders": v["orders"], "revenue": round(v["revenue"], 2)}} for k, v in sorted(by_region.items())}},
    "top_products": [[p, round(v, 2)] for p, v in top],
}}
""")
        return body["result"]


# 2 -------------------------------------------------------------------------------------------

COMMITS = 500


def parse_log(text: str) -> list[tuple[str, str]]:
    return re.findall(r"^Commit: ([0-9a-f]{40})\nAuthor: (.*)$", text, re.M)


def parse_show(text: str) -> set[str]:
    return set(re.findall(r"^\+\+\+ b/(.*)$", text, re.M)) | set(re.findall(r"^--- a/(.*)$", text, re.M))


class GitHistory(Workflow):
    """mcp-server-git's git_log names no files, so the direct agent needs one git_show per commit
    (501 calls): the only way to the changed files this server offers. The code does the same calls."""

    key = "git"
    title = f"last {COMMITS} commits: top authors, most changed files"
    servers = ["git"]

    def prepare(self, state, seed_memory):
        template = self._template = state.parent / "git-template"
        if not template.exists():
            data.git_repo(template)
        shutil.copytree(template, state / "repo", symlinks=True)

    def expected(self):
        repo = self._template
        log = subprocess.run(["git", "-C", str(repo), "log", f"-{COMMITS}", "--format=@%an", "--name-only"],
                             capture_output=True, text=True, check=True).stdout
        authors, changed = Counter(), Counter()
        for chunk in log.split("@")[1:]:
            lines = [l for l in chunk.splitlines() if l.strip()]
            authors[lines[0]] += 1
            changed.update(set(lines[1:]))
        return {"authors": data.top(authors), "files": data.top(changed)}

    def direct(self, agent, state):
        repo = str(state / "repo")
        commits = parse_log(agent.text("git", "git_log", {"repo_path": repo, "max_count": COMMITS}))
        assert len(commits) == COMMITS, len(commits)
        authors, changed = Counter(a for _, a in commits), Counter()
        # git_log gives no file names: the only way to the changed files is one git_show per commit.
        for sha, _ in commits:
            changed.update(parse_show(agent.text("git", "git_show", {"repo_path": repo, "revision": sha})))
        return {"authors": data.top(authors), "files": data.top(changed)}

    def code(self, agent, state):
        repo = str(state / "repo")
        agent.search("git log commit history", "git.git_log", detail_level="summary", limit=5)
        agent.definition("git.git_log")
        agent.definition("git.git_show")
        agent.execute(f"""
log = call_tool("git.git_log", {{"repo_path": {repo!r}, "max_count": 2}})
sha = re.search(r"Commit: ([0-9a-f]{{40}})", log).group(1)
result = {{"log": log, "show": call_tool("git.git_show", {{"repo_path": {repo!r}, "revision": sha}})}}
""")
        body = agent.execute(f"""
import asyncio
from collections import Counter
repo = {repo!r}
log = call_tool("git.git_log", {{"repo_path": repo, "max_count": {COMMITS}}})
commits = re.findall(r"^Commit: ([0-9a-f]{{40}})\\nAuthor: (.*)$", log, re.M)
shows = await asyncio.gather(*(call_tool_async("git.git_show", {{"repo_path": repo, "revision": sha}}) for sha, _ in commits))
changed = Counter()
for text in shows:
    changed.update(set(re.findall(r"^\\+\\+\\+ b/(.*)$", text, re.M)) | set(re.findall(r"^--- a/(.*)$", text, re.M)))
authors = Counter(a for _, a in commits)
top = lambda c: [[k, v] for k, v in sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[:5]]
result = {{"commits": len(commits), "authors": top(authors), "files": top(changed)}}
""", timeout_seconds=180)
        r = body["result"]
        assert r.pop("commits") == COMMITS
        return r


# 3 -------------------------------------------------------------------------------------------

class AtRiskJoin(Workflow):
    key = "join"
    servers = ["filesystem", "memory"]
    scalable = True

    def __init__(self, records: int = RECORDS):
        self.records = records
        self.customers = data.customers(n=records)
        self.accounts = data.accounts(n_customers=records, n=records * 3 // 10)
        self.title = f"{records:,}-row CSV (filesystem) x {len(self.accounts):,} accounts (memory)"

    def prepare(self, state, seed_memory):
        (files(state) / "customers.csv").write_text(data.to_csv(self.customers))
        seed_memory(state, self.accounts)

    def expected(self):
        return data.at_risk_summary(self.customers, self.accounts)

    def direct(self, agent, state):
        text = agent.text("filesystem", "read_text_file", {"path": str(state / "files" / "customers.csv")})
        rows = list(csv.DictReader(io.StringIO(text)))
        found = json.loads(agent.text("memory", "search_nodes", {"query": "at-risk"}))
        return data.at_risk_summary(rows, found["entities"])

    def code(self, agent, state):
        path = str(state / "files" / "customers.csv")
        agent.search("search knowledge graph entities", "memory.search_nodes", detail_level="summary", limit=5)
        agent.definition("memory.search_nodes")
        agent.definition("filesystem.read_text_file")
        agent.execute(f"""
head = call_tool("filesystem.read_text_file", {{"path": {path!r}, "head": 3}})
found = call_tool("memory.search_nodes", {{"query": "at-risk"}})
result = {{"csv_head": head["content"] if isinstance(head, dict) else head,
          "entities": len(found["entities"]), "sample": found["entities"][:2]}}
""")
        body = agent.execute(f"""
import csv, io
from collections import defaultdict
raw = call_tool("filesystem.read_text_file", {{"path": {path!r}}})
customers = {{r["customer_id"]: r for r in csv.DictReader(io.StringIO(raw["content"] if isinstance(raw, dict) else raw))}}
found = call_tool("memory.search_nodes", {{"query": "at-risk"}})
risky = []
for e in found["entities"]:
    obs = dict(o.split(": ", 1) for o in e["observations"])
    if obs.get("health") == "at-risk":
        risky.append((customers[e["name"]], obs["csm"]))
by_country = defaultdict(lambda: {{"accounts": 0, "mrr": 0.0}})
for c, _ in risky:
    by_country[c["country"]]["accounts"] += 1
    by_country[c["country"]]["mrr"] += float(c["mrr"])
largest = sorted(risky, key=lambda x: (-float(x[0]["mrr"]), x[0]["customer_id"]))[:5]
result = {{
    "by_country": {{k: {{"accounts": v["accounts"], "mrr": round(v["mrr"], 2)}} for k, v in sorted(by_country.items())}},
    "largest": [[c["customer_id"], c["name"], float(c["mrr"]), csm] for c, csm in largest],
}}
""")
        return body["result"]


# 4 -------------------------------------------------------------------------------------------

TOKEN = re.compile(r"^\[[A-Z_]+_\d+\]$")


def read_graph(path: Path) -> dict[str, dict]:
    out = {}
    for line in path.read_text().splitlines():
        item = json.loads(line)
        if item.get("type") == "entity":
            out[item["name"]] = {"entityType": item["entityType"], "observations": item["observations"]}
    return out


class PiiCopy(Workflow):
    key = "pii"
    servers = ["filesystem", "memory"]
    scalable = True

    def __init__(self, records: int = RECORDS):
        self.records = records
        self.title = f"copy {records:,} contacts with emails/phones: CSV -> memory"
        self.rows = data.contacts(n=records)

    def note(self, email: str) -> str:
        return f"primary contact for {self.rows[0]['company']}, reach at {email}"

    def prepare(self, state, seed_memory):
        (files(state) / "contacts.csv").write_text(data.to_csv(self.rows))

    def expected(self):
        return {"created": len(self.rows)}

    def direct(self, agent, state):
        text = agent.text("filesystem", "read_text_file", {"path": str(state / "files" / "contacts.csv")})
        rows = list(csv.DictReader(io.StringIO(text)))
        created = agent.call("memory", "create_entities", {"entities": data.contact_entities(rows)})
        agent.call("memory", "add_observations", {"observations": [
            {"entityName": rows[0]["name"], "contents": [self.note(rows[0]["email"])]}]})
        return {"created": len(created["structuredContent"]["entities"])}

    def code(self, agent, state):
        path = str(state / "files" / "contacts.csv")
        agent.search("create entities in the knowledge graph", "memory.create_entities", detail_level="summary",
                     limit=5)
        agent.definition("filesystem.read_text_file")
        agent.definition("memory.create_entities")
        agent.definition("memory.add_observations")
        agent.definition("memory.open_nodes")
        peek = agent.execute(f"""
import csv, io
raw = call_tool("filesystem.read_text_file", {{"path": {path!r}}})
rows = list(csv.DictReader(io.StringIO(raw["content"] if isinstance(raw, dict) else raw)))
result = {{"rows": len(rows), "columns": list(rows[0]), "first": rows[:3]}}
""")
        first = peek["result"]["first"][0]
        # The model only ever saw the email as a token, so that is what it writes back.
        self.seen_token = first["email"]
        assert TOKEN.match(self.seen_token), f"the email came back untokenized: {self.seen_token!r}"
        body = agent.execute(f"""
import csv, io
raw = call_tool("filesystem.read_text_file", {{"path": {path!r}}})
rows = list(csv.DictReader(io.StringIO(raw["content"] if isinstance(raw, dict) else raw)))
entities = [{{"name": r["name"], "entityType": "contact",
             "observations": [f"email: {{r['email']}}", f"phone: {{r['phone']}}", f"company: {{r['company']}}",
                              f"title: {{r['title']}}"]}} for r in rows]
created = call_tool("memory.create_entities", {{"entities": entities}})
call_tool("memory.add_observations", {{"observations": [
    {{"entityName": {first['name']!r}, "contents": [{self.note(self.seen_token)!r}]}}]}})
check = call_tool("memory.open_nodes", {{"names": [{first['name']!r}]}})
result = {{"created": len(created["entities"]), "primary": check["entities"][0]}}
""")
        self.code_answer = body
        return {"created": body["result"]["created"]}

    def check(self, direct_answer, code_answer, direct_state, code_state, agent_lines, workspace):
        super().check(direct_answer, code_answer, direct_state, code_state, agent_lines, workspace)
        want = {e["name"]: {"entityType": e["entityType"], "observations": e["observations"]}
                for e in data.contact_entities(self.rows)}
        want[self.rows[0]["name"]]["observations"].append(self.note(self.rows[0]["email"]))
        got_direct, got_code = read_graph(direct_state / "memory.jsonl"), read_graph(code_state / "memory.jsonl")
        assert got_direct == want, "direct: the memory server did not get the contacts"
        assert got_code == want, "code: the memory server did not get the real values (tokens not restored?)"
        seen = "\n".join(agent_lines)
        leaked = [v for r in self.rows for v in (r["email"], r["phone"]) if v in seen]
        assert not leaked, f"code mode returned {len(leaked)} real values to the model, e.g. {leaked[:3]}"
        primary = json.dumps(self.code_answer["result"]["primary"])
        assert self.rows[0]["email"] not in primary and self.seen_token in primary


# 5 -------------------------------------------------------------------------------------------

class FindOneTool(Workflow):
    key = "discovery"
    title = f"find and call one tool among {len(ALL_SERVERS)} servers"
    servers = ALL_SERVERS
    ARGS = {"source_timezone": "America/New_York", "time": "16:30", "target_timezone": "Asia/Tokyo"}

    def prepare(self, state, seed_memory):
        files(state)

    def expected(self):
        return self._expected

    def direct(self, agent, state):
        body = json.loads(agent.text("time", "convert_time", self.ARGS))
        return {"tokyo": body["target"]["datetime"], "difference": body["time_difference"]}

    def code(self, agent, state):
        agent.search("convert a time to another timezone", "time.convert_time", detail_level="summary", limit=5)
        agent.definition("time.convert_time")
        body = agent.execute(f"""
r = call_tool("time.convert_time", {json.dumps(self.ARGS)})
result = {{"tokyo": r["target"]["datetime"], "difference": r["time_difference"]}}
""")
        return body["result"]

    def check(self, direct_answer, code_answer, *rest):
        from datetime import datetime, timedelta
        from zoneinfo import ZoneInfo
        ny = datetime.now(ZoneInfo("America/New_York")).replace(hour=16, minute=30, second=0, microsecond=0)
        tokyo = ny.astimezone(ZoneInfo("Asia/Tokyo"))
        hours = (tokyo.utcoffset() - ny.utcoffset()) / timedelta(hours=1)
        self._expected = {"tokyo": tokyo.isoformat(), "difference": f"{hours:+.1f}h"}
        super().check(direct_answer, code_answer, *rest)


# 6 -------------------------------------------------------------------------------------------

class MonthlyReport(Workflow):
    key = "pipeline"
    servers = ["filesystem"]
    scalable = True

    def __init__(self, records: int = RECORDS):
        self.sales = data.monthly_sales(per_month=round(records / 12))
        self.records = sum(len(rows) for rows in self.sales.values())
        self.title = f"12 CSV files ({self.records:,} rows) -> report files (workspace)"
        self.report_csv, self.summary_md, self.best = data.monthly_report(self.sales)

    def prepare(self, state, seed_memory):
        d = files(state) / "sales"
        d.mkdir()
        for month, rows in self.sales.items():
            (d / f"{month}.csv").write_text(data.to_csv(rows))

    def expected(self):
        return {"best": self.best}

    def direct(self, agent, state):
        sales = state / "files" / "sales"
        listing = agent.text("filesystem", "list_directory", {"path": str(sales)})
        names = sorted(re.findall(r"^\[FILE\] (\S+\.csv)$", listing, re.M))
        text = agent.text("filesystem", "read_multiple_files", {"paths": [str(sales / n) for n in names]})
        by_month = {}
        for part in text.split("\n---\n"):
            head, _, body = part.strip("\n").partition(":\n")
            by_month[Path(head).stem] = list(csv.DictReader(io.StringIO(body.strip("\n") + "\n")))
        report, summary, best = data.monthly_report(by_month)
        out = state / "files" / "reports"
        agent.call("filesystem", "create_directory", {"path": str(out)})
        agent.call("filesystem", "write_file", {"path": str(out / "monthly_report.csv"), "content": report})
        agent.call("filesystem", "write_file", {"path": str(out / "summary.md"), "content": summary})
        return {"best": best}

    def code(self, agent, state):
        sales = str(state / "files" / "sales")
        agent.search("list directory read files", "filesystem.list_directory", detail_level="summary", limit=5)
        agent.definition("filesystem.list_directory")
        agent.definition("filesystem.read_text_file")
        agent.execute(f"""
listing = call_tool("filesystem.list_directory", {{"path": {sales!r}}})
listing = listing["content"] if isinstance(listing, dict) else listing
first = re.findall(r"\\[FILE\\] (\\S+)", listing)[0]
head = call_tool("filesystem.read_text_file", {{"path": {sales!r} + "/" + first, "head": 3}})
result = {{"listing": listing, "head": head["content"] if isinstance(head, dict) else head}}
""")
        body = agent.execute(f"""
import asyncio, csv, io
sales = {sales!r}
listing = call_tool("filesystem.list_directory", {{"path": sales}})
names = sorted(re.findall(r"^\\[FILE\\] (\\S+\\.csv)$", listing["content"], re.M))
texts = await asyncio.gather(*(call_tool_async("filesystem.read_text_file", {{"path": f"{{sales}}/{{n}}"}}) for n in names))
lines = ["month,region,orders,revenue,avg_order"]
totals = {{}}
for name, t in zip(names, texts):
    month = name[:-4]
    rows = list(csv.DictReader(io.StringIO(t["content"])))
    groups = {{}}
    for r in rows:
        groups.setdefault(r["region"], []).append(float(r["amount"]))
    for region in sorted(groups):
        a = groups[region]
        lines.append(f"{{month}},{{region}},{{len(a)}},{{sum(a):.2f}},{{sum(a) / len(a):.2f}}")
    totals[month] = sum(float(r["amount"]) for r in rows)
best = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
md = ["# Monthly sales 2025", "", f"Total revenue: {{sum(totals.values()):.2f}}", "", "Best months:"]
md += [f"- {{m}}: {{v:.2f}}" for m, v in best]
write_file("reports/monthly_report.csv", "\\n".join(lines) + "\\n")
write_file("reports/summary.md", "\\n".join(md) + "\\n")
result = {{"written": ["reports/monthly_report.csv", "reports/summary.md"], "rows": len(lines) - 1,
          "best": [[m, round(v, 2)] for m, v in best]}}
""")
        r = body["result"]
        assert r["rows"] == self.report_csv.count("\n") - 1
        return {"best": r["best"]}

    def check(self, direct_answer, code_answer, direct_state, code_state, agent_lines, workspace):
        super().check(direct_answer, code_answer, direct_state, code_state, agent_lines, workspace)
        out = direct_state / "files" / "reports"
        assert (out / "monthly_report.csv").read_text() == self.report_csv
        assert (out / "summary.md").read_text() == self.summary_md
        assert (workspace / "reports" / "monthly_report.csv").read_text() == self.report_csv
        assert (workspace / "reports" / "summary.md").read_text() == self.summary_md


# 7 -------------------------------------------------------------------------------------------

SQL = ("SELECT endpoint, COUNT(*) AS requests, ROUND(AVG(latency_ms), 1) AS avg_latency_ms, "
       "ROUND(100.0 * SUM(status >= 500) / COUNT(*), 2) AS error_pct FROM events "
       "GROUP BY endpoint ORDER BY error_pct DESC, endpoint")


class SqlAggregate(Workflow):
    """The honest counter-case: the server aggregates, so direct calls move little data."""

    key = "sql"
    title = "SQL aggregate the database does itself"
    servers = ["sqlite"]

    def __init__(self):
        self.events = data.events()

    def prepare(self, state, seed_memory):
        db = sqlite3.connect(state / "events.db")
        db.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, endpoint TEXT, status INTEGER, latency_ms REAL, day TEXT)")
        db.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?)", self.events)
        db.commit()
        db.close()

    def expected(self):
        db = sqlite3.connect(":memory:")
        db.row_factory = sqlite3.Row
        db.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, endpoint TEXT, status INTEGER, latency_ms REAL, day TEXT)")
        db.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?)", self.events)
        return [dict(r) for r in db.execute(SQL)]

    def direct(self, agent, state):
        agent.text("sqlite", "describe_table", {"table_name": "events"})
        return ast.literal_eval(agent.text("sqlite", "read_query", {"query": SQL}))

    def code(self, agent, state):
        agent.search("run a SQL query", "sqlite.read_query", detail_level="summary", limit=5)
        agent.definition("sqlite.describe_table")
        agent.definition("sqlite.read_query")
        agent.execute('result = call_tool("sqlite.describe_table", {"table_name": "events"})')
        body = agent.execute(f"""
import ast
rows = call_tool("sqlite.read_query", {{"query": {SQL!r}}})
result = ast.literal_eval(rows) if isinstance(rows, str) else rows
""")
        return body["result"]


WORKFLOWS = [OrdersSummary, GitHistory, AtRiskJoin, PiiCopy, FindOneTool, MonthlyReport, SqlAggregate]
