"""What an execute_code answer's text costs the model beyond the answer itself.

    /usr/bin/python3 bench/bench_envelope.py target/release/code-execution-mcp [--json]

Each case runs once over MCP (stdio). Counted, in o200k tokens (`code-execution-mcp tokens`):

  payload  what the answer is: the result as JSON (a text result as itself), the output, the
           traceback; what no envelope can save
  before   the text content as this server sent it until issue 60: the whole structured answer
           as compact JSON (success, result, output, timing, call counts, ...; structuredContent
           is the same object, so it is rebuilt from it exactly)
  after    the text content sent now (the lean envelope)

The overhead is the text's tokens minus the payload's. Targets (issue 60): at most 6 for a
success (with or without output), at most 6 beyond the traceback for an error.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tokens.wire import StdioClient, TokenCounter  # noqa: E402

ROWS = "[{'region': r, 'orders': n, 'total': round(n * 12.5, 2)} for r, n in [('north', 120), ('south', 85), " \
       "('east', 40), ('west', 77), ('central', 9)]]"

CASES = [
    ("success: result = 1", "result = 1"),
    ("success: a dict", "result = {'orders': 120, 'total': 1500.0, 'top': 'north'}"),
    ("output and result", "print('processed 120 orders')\nresult = 1500.0"),
    ("output only", "print('processed 120 orders')"),
    ("error: ZeroDivisionError", "total = 0\nresult = 10 / total"),
    ("error: KeyError in a function", "def top(rows):\n    return rows['north']\nresult = top({})"),
    ("table: 5 flat rows", f"result = {ROWS}"),
]


def payload(body: dict) -> str:
    """The answer without any envelope: output, result, error (as the lean text orders them)."""
    parts = []
    if body.get("output"):
        parts.append(body["output"].rstrip("\n"))
    result = body.get("result")
    if result is not None:
        parts.append(result if isinstance(result, str) else json.dumps(result, separators=(",", ":")))
    if not body.get("success"):
        parts.append((body.get("traceback") or body.get("error") or "").rstrip("\n"))
    return "\n".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    counter = TokenCounter(args.binary)
    rows = []
    # The workspace may be a mounted image the server leaves behind: left for the OS to clear.
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        config = Path(tmp) / "config.json"
        config.write_text(json.dumps({"mcpServers": {}, "sandbox": {"pool_size": 1}}))
        client = StdioClient("cem", [args.binary, "--config", str(config), "--data-dir", str(Path(tmp) / "data"),
                                     "--log-level", "error", "serve"])
        try:
            for name, code in CASES:
                result = client.request("tools/call", {"name": "execute_code", "arguments": {"code": code}}).result
                body = result["structuredContent"]
                # Until issue 60 the text was the structured answer as compact JSON (serde_json's
                # to_string, in the same key order), without the fields added since.
                old = {k: v for k, v in body.items() if k not in ("table", "images")}
                before = json.dumps(old, separators=(",", ":"), ensure_ascii=False)
                after = "".join(b.get("text", "") for b in result["content"] if b.get("type") == "text")
                base = counter.count(payload(body))
                rows.append({"case": name, "payload": base, "before": counter.count(before),
                             "after": counter.count(after), "overhead_before": counter.count(before) - base,
                             "overhead_after": counter.count(after) - base})
        finally:
            client.close()
            counter.close()
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print("| answer | payload | text before | text after | overhead before | overhead after |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['case']} | {r['payload']} | {r['before']} | {r['after']} | {r['overhead_before']} | "
              f"{r['overhead_after']} |")


if __name__ == "__main__":
    main()
