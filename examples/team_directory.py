"""A multi-server pipeline: a CSV from server-filesystem becomes entities in
server-memory, then a search over the knowledge graph; a summary goes to
the workspace and a line to stdout.

    code-execution-mcp --config mcp_config.json run examples/team_directory.py -- /data/people.csv --team compilers

Needs upstream servers named "filesystem" and "memory" in the config.
"""

import argparse
import csv
import io
import json

from cem_tools import call_tool

parser = argparse.ArgumentParser(description="Load people into the knowledge graph and find a team.")
parser.add_argument("csv_path", help="CSV file with name,team columns (as the filesystem server sees it)")
parser.add_argument("--team", required=True, help="the team to look for")
parser.add_argument("--out", default="team_summary.json", help="summary file in the workspace")
args = parser.parse_args()

text = call_tool("filesystem.read_text_file", {"path": args.csv_path})
rows = list(csv.DictReader(io.StringIO(text if isinstance(text, str) else text.get("content", ""))))
call_tool("memory.create_entities", {"entities": [
    {"name": r["name"], "entityType": "person", "observations": [f"team {r['team']}"]} for r in rows
]})
found = call_tool("memory.search_nodes", {"query": args.team})
members = sorted(e["name"] for e in found.get("entities", []))
with open(args.out, "w") as f:
    json.dump({"team": args.team, "members": members, "people_loaded": len(rows)}, f, indent=2)
print(f"{args.team}: {', '.join(members) or 'nobody'} ({len(rows)} people loaded; summary in {args.out})")
