"""Writes one run of `scripts/bench all` into BENCHMARKS.md.

Usage: report.py RESULTS_DIR BENCHMARKS.md

RESULTS_DIR holds the JSON each benchmark printed: search.json (cargo bench -p cem-catalog),
pii.json (cargo bench -p cem-pii), execute.json (bench/bench_execute.py), tokens.json
(bench/bench_tokens.py, optional). The figures go between the two markers below, replacing the
previous run; the prose around them (how each figure is measured) is left as it is.
"""

from __future__ import annotations

import json
import platform
import sys
import time
from pathlib import Path

BEGIN = "<!-- scripts/bench all: begin (generated, do not edit by hand) -->"
END = "<!-- scripts/bench all: end -->"


def load(directory: Path, name: str) -> dict | None:
    path = directory / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def verdict(ok: bool) -> str:
    return "met" if ok else "**not met**"


def latency(search: dict, pii: dict, ex: dict) -> list[str]:
    y = ex["yardstick_python_startup"]
    warm, cold, burst = ex["warm_pool_paced"], ex["no_pool_paced"], ex["warm_pool_back_to_back"]
    data = ex["data_processing_1m_rows"]
    call = ex["tool_call"]
    steady = call["steady"]
    start = ex["serve_to_first_tools_list"]
    rows = [
        ("execute_code round trip, warm pool, paced (p50)", f"{warm['p50_ms']} ms",
         f"`python3 -I -S -c pass`: {y['p50_ms']} ms", f"{ex['warm_p50_over_yardstick_p50']}", "< 1/3",
         verdict(ex["warm_p50_over_yardstick_p50"] < 1 / 3)),
        ("execute_code, no pool: a cold sandbox (p50)", f"{cold['p50_ms']} ms",
         f"`python3 -I -S -c pass`: {y['p50_ms']} ms", f"{ex['no_pool_p50_over_yardstick_p50']}", "", ""),
        ("execute_code, warm pool, back to back (p50)", f"{burst['p50_ms']} ms", "", "", "", ""),
        ("filtering 1,000,000 dicts inside the sandbox (median)", f"{data['sandboxed_median_ms']} ms",
         f"bare CPython: {data['bare_median_ms']} ms", f"{data['ratio']}", "≤ 1.05", verdict(data["ratio"] <= 1.05)),
        # The cost of a call is measured on a running server (as `serve` keeps its upstreams): the
        # first calls after a server starts race its JIT compiler, shown on the next line.
        ("one tool call from sandboxed code, server-everything echo, server warm (300 calls first; p50)",
         f"{steady['from_sandboxed_code_p50_ms']} ms", f"direct rmcp client: {steady['direct_rmcp_p50_ms']} ms",
         f"{steady['ratio_p50']}", "≤ 1.2", verdict(steady["ratio_p50"] <= 1.2)),
        ("the same call on a server just started (its first 200 calls; p50)",
         f"{call['from_sandboxed_code']['p50_ms']} ms", f"direct rmcp client: {call['direct_rmcp']['p50_ms']} ms",
         f"{call['ratio_p50']}", "", ""),
        ("tool calls per second, 50 concurrent", f"{call['from_sandboxed_code']['calls_per_second_50_concurrent']:,}",
         f"direct rmcp client: {call['direct_rmcp']['calls_per_second_50_concurrent']:,}",
         f"{round(call['from_sandboxed_code']['calls_per_second_50_concurrent'] / call['direct_rmcp']['calls_per_second_50_concurrent'], 3)}",
         "", ""),
        ("the bridge alone, a call refused at once (p50)", f"{call['bridge_round_trip_without_upstream_p50_ms']} ms",
         f"a pipe round trip between two processes: {call['pipe_round_trip_between_two_processes_p50_ms']} ms", "", "", ""),
        ("search over 10,000 tools, words and meaning (p50)", f"{search['p50_ms']} ms",
         f"words only: {search['lexical_p50_ms']} ms", f"{round(search['p50_ms'] / search['lexical_p50_ms'], 1)}",
         "< 2 ms", verdict(search["p50_ms"] < 2)),
        ("serve to first tools/list, five upstreams configured (p50)", f"{start['five_upstreams']['p50_ms']} ms",
         f"no upstreams: {start['no_upstreams']['p50_ms']} ms", f"{start['ratio_p50']}", "", ""),
        ("personal data detection, mixed text", f"{pii['detect_mb_per_s']} MB/s",
         f"tokenize: {pii['tokenize_mb_per_s']} MB/s; clean text: {pii['clean_detect_mb_per_s']} MB/s", "", "", ""),
    ]
    out = ["### Latency and throughput", "",
           "| what | figure | yardstick, same run | ratio | target | |",
           "|---|---:|---|---:|---|---|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    out += ["", f"p99s: warm execute_code {warm['p99_ms']} ms, tool call from code "
            f"{call['from_sandboxed_code']['p99_ms']} ms (direct {call['direct_rmcp']['p99_ms']} ms), search "
            f"{search['p99_ms']} ms."]
    for label, figures in (("server warm", steady), ("just started", call)):
        sp = figures.get("ratio_spread")
        if sp:
            out += ["", f"Tool-call ratio over {call['rounds']} rounds, {label}: median {sp['median']} "
                    f"(95% interval of the median {sp['median_95ci'][0]} to {sp['median_95ci'][1]}), "
                    f"quartiles {sp['p25']} to {sp['p75']}, rounds {sp['min']} to {sp['max']}."]
    return out


def tokens_section(tok: dict) -> list[str]:
    sys.path.insert(0, str(Path(__file__).parent))
    import bench_tokens  # the harness renders its own tables

    out = ["### Token reduction: direct tool calling against code execution", "",
           "`scripts/bench tokens` (`bench/bench_tokens.py`): tokens are o200k, of the exact JSON on the wire.", ""]
    out += bench_tokens.markdown(tok).splitlines()
    out += [""] + [
        f"- Servers configured {name}: median reduction **{sc['summary']['median_reduction_pct']:.2f}%** "
        f"(target: at least 99%: {verdict(sc['summary']['median_reduction_pct'] >= 99)}); "
        f"from {sc['summary']['min_reduction_pct']:.2f}% to {sc['summary']['max_reduction_pct']:.2f}%; "
        f"counting one copy of each answer (lean): {sc['summary']['median_lean_reduction_pct']:.2f}% "
        f"({'at least' if sc['summary']['median_lean_reduction_pct'] >= 99 else 'under'} 99%)."
        for name, sc in tok["scenarios"].items()]
    return out


def render(directory: Path) -> str:
    search, pii, ex = load(directory, "search"), load(directory, "pii"), load(directory, "execute")
    tok = load(directory, "tokens")
    m = ex["machine"]
    # When the run ended (its last report), not when this page was written.
    ran = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime((directory / "execute.json").stat().st_mtime))
    lines = [BEGIN, "", "## Latest run", "",
             f"`scripts/bench all`, {ran}, on {m['cores']} cores "
             f"({m['cpu']}), {m['memory_gib']} GiB, Linux {m['kernel']}, Python {platform.python_version()} "
             f"(`/usr/bin/python3`), release build. Every ratio compares two figures of this one run.", ""]
    if tok:
        lines += tokens_section(tok) + [""]
    lines += latency(search, pii, ex) + ["", END]
    return "\n".join(lines)


def main() -> None:
    directory, target = Path(sys.argv[1]), Path(sys.argv[2])
    block = render(directory)
    text = target.read_text() if target.exists() else "# Benchmarks\n\n"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        text = head + block + tail
    else:
        first_break = text.find("\n\n")
        text = text[:first_break + 2] + block + "\n\n" + text[first_break + 2:]
    target.write_text(text)
    print(block)


if __name__ == "__main__":
    main()
