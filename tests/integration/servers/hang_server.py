"""A fault-injection MCP server: it reads requests and never answers."""

import sys
import time

for _line in sys.stdin:
    time.sleep(3600)
