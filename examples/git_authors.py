"""Top authors of a git repository, from mcp-server-git's git_log.

A single-tool script: the commit log (possibly thousands of lines) stays in
the sandbox; only the ranking is printed.

    code-execution-mcp --config mcp_config.json run examples/git_authors.py -- /path/to/repo --limit 5

Needs an upstream server named "git" (mcp-server-git) in the config.
"""

import argparse
import collections
import json
import re

from cem_tools import call_tool

parser = argparse.ArgumentParser(description="Rank a repository's commit authors.")
parser.add_argument("repo", help="path of the git repository (as the git server sees it)")
parser.add_argument("--limit", type=int, default=3, help="how many authors to show")
parser.add_argument("--max-count", type=int, default=500, help="commits to read")
args = parser.parse_args()

log = call_tool("git.git_log", {"repo_path": args.repo, "max_count": args.max_count})
text = log if isinstance(log, str) else json.dumps(log)
# Lines look like "Author: Ada Lovelace" (some servers add " <email>").
authors = collections.Counter(m.strip() for m in re.findall(r"^Author:\s*([^<\n]+)", text, re.MULTILINE))
for name, count in authors.most_common(args.limit):
    print(f"{count:5d}  {name}")
