"""A fault-injection MCP server (Python SDK 1.x FastMCP) for the upstream tests.

Tools: ok() answers; crash() kills the process mid-call; sleep(seconds)
answers late; slow_steps(steps) reports progress and notes its cancellation; freeze(seconds) blocks the server, which stops reading its input; big_image(kib) returns binary content; note(text, tags) declares maxLength bounds; add_tool(name) registers a new tool and announces
notifications/tools/list_changed. With FAULT_STUBBORN_PIDFILE set, it starts a child, ignores
SIGTERM and the end of its input, and writes both pids to that file; with FAULT_ORPHAN_PIDFILE set,
it exits at the end of its input but its child ignores SIGTERM; FAULT_START_DELAY (seconds) makes
it slow to start. FAULT_EXTRA_TOOLS (names separated by commas) adds tools with awkward names
("delete.repo", "import", "drop table") from the start; each returns its own name.
"""

import asyncio
import os
from typing import Annotated

from mcp.server.fastmcp import Context, FastMCP, Image
from pydantic import Field

server = FastMCP("fault")

for extra in filter(None, os.environ.get("FAULT_EXTRA_TOOLS", "").split(",")):
    server.add_tool(lambda extra=extra: extra, name=extra, description=f"answers {extra}")


@server.tool()
def ok() -> str:
    """Answers at once."""
    return f"ok from {os.getpid()}"


@server.tool()
def crash() -> str:
    """Exits the process in the middle of the call."""
    os._exit(3)


@server.tool()
async def sleep(seconds: float) -> str:
    """Answers after `seconds`."""
    await asyncio.sleep(seconds)
    return "slept"


@server.tool()
async def slow_steps(steps: int, ctx: Context) -> str:
    """Reports progress for `steps` steps of 0.2 s each. With FAULT_CANCELLED_FILE set, writes "cancelled" there
    when the call is cancelled (notifications/cancelled reached it)."""
    try:
        for i in range(1, steps + 1):
            await asyncio.sleep(0.2)
            await ctx.report_progress(i, steps, f"upstream step {i}")
    except asyncio.CancelledError:
        if os.environ.get("FAULT_CANCELLED_FILE"):
            with open(os.environ["FAULT_CANCELLED_FILE"], "w") as f:
                f.write("cancelled")
        raise
    return "stepped"


@server.tool()
def freeze(seconds: float) -> str:
    """Blocks the whole server (it stops reading its input) for `seconds`."""
    import time

    time.sleep(seconds)
    return "thawed"


@server.tool()
async def add_tool(name: str, ctx: Context) -> str:
    """Adds a tool called `name` and tells the client the list changed."""
    server.add_tool(lambda: name, name=name, description=f"dynamically added {name}")
    await ctx.session.send_tool_list_changed()
    return "added"


@server.tool()
def note(
    text: Annotated[str, Field(max_length=50)],
    tags: list[Annotated[str, Field(max_length=8)]] | None = None,
) -> str:
    """Declares maxLength 50 on text and 8 on each tag; with FAULT_NOTES_FILE set, appends what reached it there."""
    if os.environ.get("FAULT_NOTES_FILE"):
        with open(os.environ["FAULT_NOTES_FILE"], "a") as f:
            f.write(text + "\n")
    return f"noted {len(text)}"


@server.tool()
def big_image(kib: int) -> Image:
    """Returns a PNG-typed image of `kib` KiB (for the binary-content path)."""
    return Image(data=bytes(range(256)) * (kib * 4), format="png")


@server.tool()
def big_text(mib: int) -> str:
    """Returns `mib` MiB of text (for the result-size limit)."""
    return "x" * (mib << 20)


if __name__ == "__main__":
    if os.environ.get("FAULT_START_DELAY"):
        import time

        time.sleep(float(os.environ["FAULT_START_DELAY"]))  # a slow first start
    stubborn = os.environ.get("FAULT_STUBBORN_PIDFILE")
    if stubborn:
        # A server that leaves a child behind and will not go: it ignores
        # SIGTERM and the end of its stdin.
        import signal
        import subprocess
        import time

        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = subprocess.Popen(["sleep", "600"])
        with open(stubborn, "w") as f:
            f.write(f"{os.getpid()} {child.pid}")
        server.run()
        time.sleep(600)
    elif os.environ.get("FAULT_ORPHAN_PIDFILE"):
        # A server that exits at the end of its input but leaves behind a
        # child that ignores SIGTERM.
        import subprocess

        child = subprocess.Popen(["sh", "-c", "trap '' TERM; exec sleep 600"])
        with open(os.environ["FAULT_ORPHAN_PIDFILE"], "w") as f:
            f.write(f"{os.getpid()} {child.pid}")
        server.run()
    else:
        server.run()
