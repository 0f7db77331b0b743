"""A fault-injection MCP server: it reads requests and never answers.

With HANG_PIDFILE set, it writes its pid there first.
"""

import os
import sys
import time

if os.environ.get("HANG_PIDFILE"):
    with open(os.environ["HANG_PIDFILE"], "w") as f:
        f.write(str(os.getpid()))
for _line in sys.stdin:
    time.sleep(3600)
