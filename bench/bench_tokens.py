"""Token reduction of real workflows: an agent calling upstream tools directly vs. writing code.

    bench/setup                                   # once: the upstream servers (npm + two virtualenvs)
    /usr/bin/python3 bench/bench_tokens.py target/release/code-execution-mcp [--out report.json]

Every workflow runs twice against real upstream MCP servers started here, from the same
seeded state:

  direct  the agent's client connects every server the workflow needs and calls tools itself.
          Counted: each server's tools/list result, each tools/call's params and each result.
  code    the agent's client connects only `code-execution-mcp serve`, configured with the same
          servers. Counted: our tools/list result, search_tools / get_tool_definition requests and
          answers, execute_code requests (the code) and answers.

What is counted is the JSON text exactly as it crossed the wire (each line is recorded as
written and read), tokenized with o200k by `code-execution-mcp tokens`. A second, "lean" view
counts what a frugal client might keep instead (tool name, description and inputSchema; only
the content text of results) with the same rule on both sides. Nothing is estimated.

Each workflow's two answers are asserted equal to each other and to the answer computed from the
generated data, so a broken workflow fails loudly instead of printing a number. Wall times are
those of the real calls (server start-up and requests; there is no model in the loop).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tokens.agents import ALL_SERVERS, CodeAgent, DirectAgent, check_installed, server_spec  # noqa: E402
from tokens.wire import StdioClient, TokenCounter  # noqa: E402
from tokens.workflows import WORKFLOWS  # noqa: E402


def seed_memory(state: Path, entities: list[dict]) -> None:
    """Pre-seeds the knowledge graph through the memory server itself (not counted)."""
    spec = server_spec("memory", state)
    c = StdioClient("memory-seed", [spec["command"], *spec["args"]], env=spec.get("env"))
    try:
        ex = c.call("create_entities", {"entities": entities})
        assert not ex.result.get("isError"), ex.response_line[:500]
    finally:
        c.close()


def pct(part: float, whole: float) -> float:
    return round(100.0 * part / whole, 2) if whole else 0.0


def fresh_state(wf, state: Path) -> None:
    state.mkdir()
    (state / "files").mkdir()  # the filesystem server's root, needed whether or not the workflow uses it
    wf.prepare(state, seed_memory)


def write_transcript(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines))


def run_workflow(wf, binary: str, base: Path, tc: TokenCounter, tools_mode: str, servers: list[str]) -> dict:
    logs = base / "logs"
    logs.mkdir(parents=True)
    state = base / "state"  # the same path in both runs, so arguments are byte for byte the same

    fresh_state(wf, state)
    direct = DirectAgent(servers, state, tc, logs)
    try:
        direct_answer = wf.direct(direct, state)
        write_transcript(logs / "direct-transcript.jsonl", direct.transcript())
    finally:
        direct.close()
    direct_state = state.rename(base / "state-direct")

    fresh_state(wf, state)
    code = CodeAgent(binary, servers, state, base / "data", tc, logs, tools_mode)
    try:
        code_answer = wf.code(code, state)
        lines = code.response_lines()
        write_transcript(logs / "code-transcript.jsonl", code.transcript())
    finally:
        code.close()
    code_state = state.rename(base / "state-code")

    wf.check(direct_answer, code_answer, direct_state, code_state, lines, code.workspace)

    d, c = direct.tally, code.tally
    direct_parts = {"schemas": d.sum("schemas", "result_tokens"), "call_args": d.sum("call", "params_tokens"),
                    "results": d.sum("call", "result_tokens")}
    direct_lean = {"schemas": d.sum("schemas", "result_lean"), "call_args": d.sum("call", "params_lean"),
                   "results": d.sum("call", "result_lean")}
    code_parts = {"tools_list": c.sum("tools_list", "result_tokens"),
                  "discovery": c.sum("discovery", "params_tokens") + c.sum("discovery", "result_tokens"),
                  "code": c.sum("execute", "params_tokens"), "answers": c.sum("execute", "result_tokens")}
    code_lean = {"tools_list": c.sum("tools_list", "result_lean"),
                 "discovery": c.sum("discovery", "params_lean") + c.sum("discovery", "result_lean"),
                 "code": c.sum("execute", "params_lean"), "answers": c.sum("execute", "result_lean")}
    dt, ct = sum(direct_parts.values()), sum(code_parts.values())
    dl, cl = sum(direct_lean.values()), sum(code_lean.values())
    return {
        "key": wf.key,
        "title": wf.title,
        "records": wf.records,
        "servers": servers,
        "answer": direct_answer,
        "direct": {
            "tokens": {**direct_parts, "total": dt},
            "lean_tokens": {**direct_lean, "total": dl},
            "schema_tokens_by_server": dict(sorted(direct.schemas.items())),
            "tools_by_server": dict(sorted(direct.tool_counts.items())),
            "tool_calls": d.count("call"),
            "start_seconds": round(d.start_seconds, 3),
            "calls_seconds": round(d.seconds("call"), 3),
            # Start-up plus the round trips of the calls; the harness's own parsing and token counting
            # happen between calls and are left out.
            "wall_seconds": round(d.start_seconds + d.seconds("call"), 3),
        },
        "code": {
            "tokens": {**code_parts, "total": ct},
            "lean_tokens": {**code_lean, "total": cl},
            "requests": {"search_tools/get_tool_definition": c.count("discovery"), "execute_code": c.count("execute")},
            "upstream_calls_in_sandbox": c.upstream_calls,
            "start_seconds": round(c.start_seconds, 3),
            "calls_seconds": round(c.seconds("discovery", "execute"), 3),
            "wall_seconds": round(c.start_seconds + c.seconds("discovery", "execute"), 3),
        },
        "reduction_pct": pct(dt - ct, dt),
        "lean_reduction_pct": pct(dl - cl, dl),
        "exchanges": {
            "direct": [r.__dict__ for r in d.records],
            "code": [r.__dict__ for r in c.records],
        },
    }


def run_reported(label: str, wf, binary: str, base: Path, tc: TokenCounter, tools_mode: str,
                 servers: list[str]) -> dict:
    """run_workflow, with a line of progress on stderr before and after."""
    print(f"{label}: {wf.key}: {wf.title}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    r = run_workflow(wf, binary, base, tc, tools_mode, servers)
    print(f"    direct {fmt(r['direct']['tokens']['total'])} tokens, code {fmt(r['code']['tokens']['total'])}: "
          f"{r['reduction_pct']:.2f}% fewer ({time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)
    return r


def fmt(n: int) -> str:
    return f"{n:,}"


SCENARIOS = {
    "needed": "each workflow configures only the servers it uses (the direct side's least context)",
    "all": f"every workflow configures the same {len(ALL_SERVERS)} servers, as one agent config does",
}


def markdown_table(scenario: dict) -> str:
    rows = scenario["workflows"]
    out = ["| workflow | direct tokens | schemas / args / results | code tokens | tools/list / discovery / code / answers "
           "| reduction | lean reduction | direct calls | code requests (calls in sandbox) | wall s direct / code |",
           "|---|---:|---|---:|---|---:|---:|---:|---:|---:|"]
    for i, w in enumerate(rows, 1):
        d, c = w["direct"], w["code"]
        dt, ct = d["tokens"], c["tokens"]
        req = sum(c["requests"].values())
        out.append(
            f"| {i}. {w['key']}: {w['title']} | {fmt(dt['total'])} | {fmt(dt['schemas'])} / {fmt(dt['call_args'])} / "
            f"{fmt(dt['results'])} | {fmt(ct['total'])} | {fmt(ct['tools_list'])} / {fmt(ct['discovery'])} / "
            f"{fmt(ct['code'])} / {fmt(ct['answers'])} | {w['reduction_pct']:.2f}% | {w['lean_reduction_pct']:.2f}% "
            f"| {d['tool_calls']} | {req} ({c['upstream_calls_in_sandbox']}) "
            f"| {d['wall_seconds']:.2f} / {c['wall_seconds']:.2f} |")
    s = scenario["summary"]
    out.append(f"| **median** | {fmt(s['direct_tokens_total'])} (sum) | | {fmt(s['code_tokens_total'])} (sum) | "
               f"| **{s['median_reduction_pct']:.2f}%** | {s['median_lean_reduction_pct']:.2f}% | | | |")
    return "\n".join(out)


def sweep_table(report: dict) -> list[str]:
    """The data workflows rerun at other sizes (servers needed), beside the main run's figures."""
    sweep = report.get("sweep")
    if not sweep:
        return []
    needed = report["scenarios"].get("needed")
    main = {w["key"]: w for w in needed["workflows"]} if needed else {}
    sizes = sweep["sizes"]
    head = [f"{n:,} records" for n in sizes] + (["the main run (above)"] if main else [])
    out = ["#### Reduction by data size: the data workflows rerun smaller (servers needed)", "",
           "Each cell: reduction (direct tokens → code tokens). The other workflows move no more data at "
           "any size; the median takes their figures from the main run.", "",
           "| workflow | " + " | ".join(head) + " |", "|---|" + "---:|" * len(head)]

    def cell(r: dict, nominal: int | None = None) -> str:
        text = f"{r['reduction_pct']:.2f}% ({fmt(r['direct_tokens'])} → {fmt(r['code_tokens'])})"
        # The pipeline spreads its rows over twelve months of different sizes: say how many it had.
        return text if r.get("records") in (None, nominal) else f"{text}, {fmt(r['records'])} records"

    for key in sweep["keys"]:
        cells = [cell(sweep["runs"][str(n)][key], n) for n in sizes]
        w = main.get(key)
        if main:
            cells.append(cell({"reduction_pct": w["reduction_pct"], "direct_tokens": w["direct"]["tokens"]["total"],
                               "code_tokens": w["code"]["tokens"]["total"], "records": w["records"]}) if w else "")
        out.append(f"| {key} | " + " | ".join(cells) + " |")
    if main:
        medians = [statistics.median(sweep["runs"][str(n)].get(k, w)["reduction_pct"] for k, w in main.items())
                   for n in sizes]
        medians.append(needed["summary"]["median_reduction_pct"])
        out.append(f"| **median of all {len(main)}** | " + " | ".join(f"**{m:.2f}%**" for m in medians) + " |")
    return out + [""]


def markdown(report: dict) -> str:
    out = []
    for name, scenario in report["scenarios"].items():
        out += [f"#### Servers configured: {name}: {SCENARIOS[name]}", "", markdown_table(scenario), ""]
    out += sweep_table(report)
    schemas = report.get("schema_tokens_by_server")
    if schemas:
        out += ["Tool schemas (each server's tools/list result as on the wire), o200k tokens:", "",
                "| server | tools | tokens |", "|---|---:|---:|"]
        for name, v in schemas.items():
            out.append(f"| {name} | {v['tools']} | {fmt(v['tokens'])} |")
        out.append(f"| all {len(schemas)} | {sum(v['tools'] for v in schemas.values())} | "
                   f"{fmt(sum(v['tokens'] for v in schemas.values()))} |")
        out.append("")
    out.append(f"Our tools/list (`serve --tools {report['tools_mode']}`): {fmt(report['our_tools_list_tokens'])} tokens.")
    return "\n".join(out)


def summarize(results: list[dict]) -> dict:
    return {
        "median_reduction_pct": round(statistics.median(r["reduction_pct"] for r in results), 2),
        "median_lean_reduction_pct": round(statistics.median(r["lean_reduction_pct"] for r in results), 2),
        "min_reduction_pct": min(r["reduction_pct"] for r in results),
        "max_reduction_pct": max(r["reduction_pct"] for r in results),
        "direct_tokens_total": sum(r["direct"]["tokens"]["total"] for r in results),
        "code_tokens_total": sum(r["code"]["tokens"]["total"] for r in results),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("binary", nargs="?", default="target/release/code-execution-mcp")
    ap.add_argument("--out", help="write the JSON report here")
    ap.add_argument("--only", help="comma-separated workflow keys (" + ",".join(w.key for w in WORKFLOWS) + ")")
    ap.add_argument("--servers", choices=["needed", "all", "both"], default="both",
                    help="which servers each workflow configures (default: both scenarios, one after the other)")
    ap.add_argument("--tools", default="full", choices=["full", "minimal"], help="our `serve --tools` mode")
    ap.add_argument("--keep", action="store_true", help="keep the working directory (state, logs, transcripts)")
    ap.add_argument("--sizes", default="",
                    help="comma-separated record counts: rerun the data workflows at each (servers needed), "
                         "e.g. 100,1000")
    args = ap.parse_args()
    try:
        sizes = sorted({int(n.replace("_", "")) for n in args.sizes.split(",") if n.strip()})
    except ValueError:
        raise SystemExit(f"--sizes takes record counts such as 100,1000, not {args.sizes!r}") from None
    if any(n < 12 for n in sizes):
        raise SystemExit("--sizes: each size must be at least 12 records (the pipeline spreads them over 12 files)")

    binary = str(Path(args.binary).resolve())
    if not os.access(binary, os.X_OK):
        raise SystemExit(f"{binary} is not an executable; build it with `cargo build --release --locked`")
    check_installed()
    chosen = [w for w in WORKFLOWS if not args.only or w.key in args.only.split(",")]
    if not chosen:
        raise SystemExit("no workflow selected")
    scenarios = ["needed", "all"] if args.servers == "both" else [args.servers]

    # A fixed working directory, so the paths inside arguments (and so the counts) repeat run to run.
    root = Path(tempfile.gettempdir()) / f"cem-bench-tokens-{os.getuid()}"
    root.mkdir(exist_ok=True)
    lock = open(root / ".lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SystemExit(f"another bench_tokens.py is running in {root}") from None
    # A run's servers leave each workspace mounted on its own image (the disk quota): unmounted
    # first, or the last run's directories cannot be removed.
    for mount in sorted((line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
                         if line.split()[1].startswith(f"{root}/")), reverse=True):
        subprocess.run(["umount", "-l", mount], check=False)
    for old in root.iterdir():
        if old.name != ".lock":
            shutil.rmtree(old) if old.is_dir() else old.unlink()
    tc = TokenCounter(binary)
    report = {
        "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "binary": binary,
        "tools_mode": args.tools,
        "tokenizer": "o200k (code-execution-mcp tokens)",
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version()},
        "scenarios": {},
    }
    schemas: dict[str, dict] = {}
    try:
        n, total = 0, len(chosen) * len(scenarios)
        for scenario in scenarios:
            results = []
            for cls in chosen:
                wf = cls()
                servers = wf.servers if scenario == "needed" else ALL_SERVERS
                n += 1
                r = run_reported(f"[{n}/{total}] {scenario}", wf, binary, root / scenario / wf.key, tc, args.tools,
                                 servers)
                results.append(r)
                for e in r["exchanges"]["direct"]:
                    if e["kind"] == "schemas":
                        schemas[e["server"]] = {"tools": r["direct"]["tools_by_server"][e["server"]],
                                                "tokens": e["result_tokens"]}
                report["our_tools_list_tokens"] = r["code"]["tokens"]["tools_list"]
            report["scenarios"][scenario] = {"description": SCENARIOS[scenario], "workflows": results,
                                             "summary": summarize(results)}
        scalable = [cls for cls in chosen if cls.scalable]
        if sizes and scalable:
            sweep = {"scenario": "needed", "sizes": sizes, "keys": [cls.key for cls in scalable], "runs": {}}
            for size in sizes:
                runs = sweep["runs"][str(size)] = {}
                for cls in scalable:
                    wf = cls(size)
                    r = run_reported(f"[size {size:,}]", wf, binary, root / f"size-{size}" / wf.key, tc, args.tools,
                                     wf.servers)
                    runs[wf.key] = {"records": wf.records, "reduction_pct": r["reduction_pct"],
                                    "lean_reduction_pct": r["lean_reduction_pct"],
                                    "direct_tokens": r["direct"]["tokens"]["total"],
                                    "code_tokens": r["code"]["tokens"]["total"]}
            report["sweep"] = sweep
    finally:
        tc.close()
        if args.keep:
            print(f"working directory kept: {root}", file=sys.stderr)
        else:
            for old in root.iterdir():
                if old.name != ".lock":
                    shutil.rmtree(old, ignore_errors=True)
        lock.close()
    report["schema_tokens_by_server"] = {s: schemas[s] for s in ALL_SERVERS if s in schemas}
    # A flat summary of the first scenario run (the `needed` one by default), for tables elsewhere
    # (bench/report.py); the full figures stay under "scenarios".
    primary = next(iter(report["scenarios"]))
    report["primary_scenario"] = primary
    report["median_reduction_pct"] = report["scenarios"][primary]["summary"]["median_reduction_pct"]
    report["workflows"] = [{
        "key": w["key"], "title": w["title"], "reduction_pct": w["reduction_pct"],
        "direct": {"tokens": w["direct"]["tokens"]["total"], "calls": w["direct"]["tool_calls"],
                   "wall_ms": round(w["direct"]["wall_seconds"] * 1000, 1)},
        "code": {"tokens": w["code"]["tokens"]["total"], "requests": sum(w["code"]["requests"].values()),
                 "calls": w["code"]["upstream_calls_in_sandbox"], "wall_ms": round(w["code"]["wall_seconds"] * 1000, 1)},
    } for w in report["scenarios"][primary]["workflows"]]
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
