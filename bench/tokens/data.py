"""Deterministic data for the workflows: every generator takes a seed and gives the same bytes."""

from __future__ import annotations

import csv
import io
import json
import random
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

REGIONS = ["NA", "EMEA", "APAC", "LATAM"]
COUNTRIES = ["US", "DE", "FR", "GB", "JP", "BR", "IN", "CA", "AU", "ES"]
FIRST = ["Ada", "Grace", "Linus", "Barbara", "Ken", "Margaret", "Dennis", "Frances", "Guido", "Radia",
         "Donald", "Edsger", "Hedy", "Alan", "Katherine", "John", "Sophie", "Tim", "Anita", "Bjarne"]
LAST = ["Lovelace", "Hopper", "Torvalds", "Liskov", "Thompson", "Hamilton", "Ritchie", "Allen", "van Rossum",
        "Perlman", "Knuth", "Dijkstra", "Lamarr", "Turing", "Johnson", "Backus", "Wilson", "Berners-Lee",
        "Borg", "Stroustrup", "Kay", "Goldberg", "Engelbart", "Cerf", "Kahn"]
SYLLABLES = ["ac", "me", "zen", "tri", "lo", "va", "nex", "or", "ion", "ka", "pi", "ra", "dyn", "sol", "ve", "tek"]


def company(rng: random.Random) -> str:
    word = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()
    return f"{word} {rng.choice(['Labs', 'Systems', 'GmbH', 'Inc', 'Ltd', 'Group', 'Works'])}"


# 1. orders.json: 10,000 orders ------------------------------------------------------------

def orders(seed: int = 1, n: int = 10_000) -> list[dict]:
    rng = random.Random(seed)
    products = {f"P-{i:03d}": round(rng.uniform(4, 400), 2) for i in range(60)}
    names = list(products)
    weights = [1 / (i + 1) ** 0.6 for i in range(len(names))]
    start = datetime(2024, 7, 1)
    rows = []
    for i in range(n):
        p = rng.choices(names, weights)[0]
        rows.append({
            "id": 100000 + i,
            "date": (start + timedelta(days=rng.randrange(0, 540))).strftime("%Y-%m-%d"),
            "region": rng.choices(REGIONS, [5, 4, 3, 1])[0],
            "customer": f"C{rng.randrange(1, 3000):04d}",
            "product": p,
            "qty": rng.randint(1, 12),
            "unit_price": products[p],
            "status": rng.choices(["delivered", "returned", "cancelled", "pending"], [70, 8, 10, 12])[0],
        })
    return rows


def orders_summary(rows: list[dict]) -> dict:
    """The question of workflow 1: delivered orders of 2025, by region, and the top products."""
    by_region: dict[str, dict] = {}
    by_product: dict[str, float] = {}
    for r in rows:
        if r["status"] != "delivered" or not r["date"].startswith("2025-"):
            continue
        revenue = r["qty"] * r["unit_price"]
        g = by_region.setdefault(r["region"], {"orders": 0, "revenue": 0.0})
        g["orders"] += 1
        g["revenue"] += revenue
        by_product[r["product"]] = by_product.get(r["product"], 0.0) + revenue
    top = sorted(by_product.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    return {
        "by_region": {k: {"orders": v["orders"], "revenue": round(v["revenue"], 2)} for k, v in sorted(by_region.items())},
        "top_products": [[p, round(v, 2)] for p, v in top],
    }


# 2. a git repository: 620 commits, last 500 analysed -----------------------------------------

AUTHORS = [("Ada Lovelace", "ada@example.org"), ("Grace Hopper", "grace@example.org"),
           ("Linus Torvalds", "linus@example.org"), ("Barbara Liskov", "barbara@example.org"),
           ("Ken Thompson", "ken@example.org"), ("Margaret Hamilton", "margaret@example.org"),
           ("Dennis Ritchie", "dennis@example.org"), ("Frances Allen", "frances@example.org"),
           ("Radia Perlman", "radia@example.org")]


def git_repo(path: Path, seed: int = 2, commits: int = 620) -> None:
    """Writes the repository with `git fast-import` (seconds, not minutes)."""
    rng = random.Random(seed)
    files = ([f"src/module_{i:02d}.py" for i in range(24)] + [f"tests/test_{i:02d}.py" for i in range(10)]
             + [f"docs/page_{i}.md" for i in range(6)])
    fweights = [1 / (i + 1) ** 0.8 for i in range(len(files))]
    rng.shuffle(fweights)
    contents = {f: [f"# {f} line {k}" for k in range(12)] for f in files}
    aweights = [30, 22, 15, 10, 8, 6, 4, 3, 2]
    t = datetime(2024, 1, 1, 9, tzinfo=timezone.utc)
    out = io.StringIO()
    for n in range(commits):
        t += timedelta(minutes=rng.randint(20, 900))
        name, email = AUTHORS[rng.choices(range(len(AUTHORS)), aweights)[0]] if n >= 40 else AUTHORS[0]
        if n < len(files):
            touched = [files[n]]  # the first commits add the files
        else:
            touched = sorted(set(rng.choices(files, fweights, k=rng.choice([1, 1, 1, 2, 2, 3]))))
        for f in touched:
            if n >= len(files):
                k = rng.randrange(12)
                contents[f][k] = f"# {f} line {k} changed in {n}"
        msg = f"{rng.choice(['Fix', 'Refactor', 'Tune', 'Document', 'Test', 'Clean up'])} {touched[0].split('/')[-1]} (#{n})"
        ts = int(t.timestamp())
        out.write(f"commit refs/heads/main\nauthor {name} <{email}> {ts} +0000\ncommitter {name} <{email}> {ts} +0000\n")
        data = msg.encode()
        out.write(f"data {len(data)}\n{msg}\n")
        for f in touched:
            body = ("\n".join(contents[f]) + "\n").encode()
            out.write(f"M 100644 inline {f}\ndata {len(body)}\n{body.decode()}\n")
        out.write("\n")
    path.mkdir(parents=True)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(path), "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True, env=env)
    subprocess.run(["git", "-C", str(path), "fast-import", "--quiet"], input=out.getvalue().encode(), check=True, env=env)
    subprocess.run(["git", "-C", str(path), "checkout", "-q", "main"], check=True, env=env)


def top(counter: dict[str, int], n: int = 5) -> list[list]:
    return [[k, v] for k, v in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:n]]


# 3. customers.csv + accounts in the knowledge graph ------------------------------------------

def customers(seed: int = 3, n: int = 10_000) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        plan = rng.choices(["starter", "pro", "enterprise"], [6, 3, 1])[0]
        base = {"starter": 49, "pro": 499, "enterprise": 4999}[plan]
        rows.append({"customer_id": f"C{i + 1:04d}", "name": company(rng), "country": rng.choice(COUNTRIES),
                     "plan": plan, "mrr": round(base * rng.uniform(0.8, 3.0), 2)})
    return rows


def to_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def accounts(seed: int = 4, n_customers: int = 10_000, n: int = 3_000) -> list[dict]:
    """Knowledge-graph entities (create_entities' format) for a sample of the customers."""
    rng = random.Random(seed)
    ids = sorted(rng.sample(range(1, n_customers + 1), n))
    csms = [f"{f} {l}" for f, l in zip(FIRST[:8], LAST[:8])]
    out = []
    for i in ids:
        health = rng.choices(["healthy", "at-risk", "churned"], [70, 20, 10])[0]
        out.append({"name": f"C{i:04d}", "entityType": "account", "observations": [
            f"health: {health}", f"csm: {rng.choice(csms)}",
            f"last contact: 2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"]})
    return out


def at_risk_summary(customer_rows: list[dict], entities: list[dict]) -> dict:
    by_id = {r["customer_id"]: r for r in customer_rows}
    risky = []
    for e in entities:
        obs = dict(o.split(": ", 1) for o in e["observations"])
        if obs.get("health") == "at-risk":
            c = by_id[e["name"]]
            risky.append((c, obs["csm"]))
    by_country: dict[str, dict] = {}
    for c, _ in risky:
        g = by_country.setdefault(c["country"], {"accounts": 0, "mrr": 0.0})
        g["accounts"] += 1
        g["mrr"] += float(c["mrr"])
    largest = sorted(risky, key=lambda x: (-float(x[0]["mrr"]), x[0]["customer_id"]))[:5]
    return {
        "by_country": {k: {"accounts": v["accounts"], "mrr": round(v["mrr"], 2)} for k, v in sorted(by_country.items())},
        "largest": [[c["customer_id"], c["name"], float(c["mrr"]), csm] for c, csm in largest],
    }


# 4. contacts with personal data ------------------------------------------------------------

def contacts(seed: int = 5, n: int = 10_000) -> list[dict]:
    rng = random.Random(seed)
    rows, seen = [], set()
    while len(rows) < n:
        first, last = rng.choice(FIRST), rng.choice(LAST)
        name = f"{first} {last}"
        initials = ""
        while name in seen:  # only 500 plain names: larger lists add middle initials until unique
            initials += f"{rng.choice('ABCDEFGHJKLMNPRSTW')}. "
            name = f"{first} {initials}{last}"
        seen.add(name)
        comp = company(rng)
        domain = comp.split()[0].lower() + ".example.com"
        user = f"{first}.{last}".lower().replace(" ", "").replace("-", "")
        area, mid, end = rng.randint(201, 989), rng.randint(200, 989), rng.randint(1000, 9999)
        phone = rng.choice([f"+1 {area}-{mid}-{end}", f"({area}) {mid}-{end}", f"+1 ({area}) {mid} {end}"])
        rows.append({"name": name, "email": f"{user}{len(rows)}@{domain}", "phone": phone, "company": comp,
                     "title": rng.choice(["CTO", "Engineer", "Buyer", "Head of Data", "CFO", "Analyst"])})
    return rows


def contact_entities(rows: list[dict]) -> list[dict]:
    return [{"name": r["name"], "entityType": "contact",
             "observations": [f"email: {r['email']}", f"phone: {r['phone']}", f"company: {r['company']}",
                              f"title: {r['title']}"]} for r in rows]


# 6. monthly sales files --------------------------------------------------------------------

def monthly_sales(seed: int = 6, per_month: int = 833) -> dict[str, list[dict]]:
    rng = random.Random(seed)
    out = {}
    oid = 500000
    for m in range(1, 13):
        rows = []
        spread = per_month * 3 // 14  # each month within about ±20% (±150 rows at 700, as before)
        for _ in range(per_month + rng.randint(-spread, spread)):
            oid += 1
            rows.append({"order_id": oid, "date": f"2025-{m:02d}-{rng.randint(1, 28):02d}",
                         "region": rng.choices(REGIONS, [5, 4, 3, 1])[0],
                         "channel": rng.choice(["web", "partner", "sales"]),
                         "amount": round(rng.lognormvariate(4.5, 0.8), 2)})
        out[f"2025-{m:02d}"] = rows
    return out


def monthly_report(files: dict[str, list[dict]]) -> tuple[str, str, list]:
    """(report.csv, summary.md, best months): what workflow 6 writes."""
    lines = ["month,region,orders,revenue,avg_order"]
    totals = {}
    for month in sorted(files):
        groups: dict[str, list[float]] = {}
        for r in files[month]:
            groups.setdefault(r["region"], []).append(float(r["amount"]))
        for region in sorted(groups):
            a = groups[region]
            lines.append(f"{month},{region},{len(a)},{sum(a):.2f},{sum(a) / len(a):.2f}")
        totals[month] = sum(float(r["amount"]) for r in files[month])
    best = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
    md = ["# Monthly sales 2025", "", f"Total revenue: {sum(totals.values()):.2f}", "", "Best months:"]
    md += [f"- {m}: {v:.2f}" for m, v in best]
    return "\n".join(lines) + "\n", "\n".join(md) + "\n", [[m, round(v, 2)] for m, v in best]


# 7. events in SQLite -----------------------------------------------------------------------

def events(seed: int = 7, n: int = 5_000) -> list[tuple]:
    rng = random.Random(seed)
    endpoints = ["/api/orders", "/api/users", "/api/search", "/api/cart", "/api/checkout", "/api/login"]
    rows = []
    for i in range(n):
        ep = rng.choice(endpoints)
        status = rng.choices([200, 201, 400, 404, 500, 503], [80, 5, 5, 4, 4, 2])[0]
        rows.append((i + 1, ep, status, round(rng.lognormvariate(4, 0.6), 1), f"2025-06-{rng.randint(1, 30):02d}"))
    return rows


def write_json(path: Path, value) -> None:
    path.write_text(json.dumps(value))
