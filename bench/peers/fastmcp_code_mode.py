"""The peer: FastMCP's code mode (CodeMode over a proxy of the same upstream), over stdio.

    python fastmcp_code_mode.py UPSTREAM_PYTHON UPSTREAM_SCRIPT

Run with the interpreter of the environment `scripts/bench peers` builds (fastmcp[code-mode]).
Its defaults, except that a tool-call limit of 50 would stop the 100-call scenario.
"""

import sys

from fastmcp.experimental.transforms.code_mode import CodeMode
from fastmcp.server import create_proxy

python, script = sys.argv[1], sys.argv[2]
# The upstream speaks the 2025 handshake: pinned, not mirrored from the front.
server = create_proxy({"mcpServers": {"bench": {"command": python, "args": [script]}}}, mode="auto", name="peer")
server.add_transform(CodeMode(max_tool_calls=None))

if __name__ == "__main__":
    server.run(show_banner=False)
