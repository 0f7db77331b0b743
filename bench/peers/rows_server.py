"""The upstream both code modes call in `scripts/bench peers` (MCP Python SDK, stdio).

add(a, b) answers {"sum": a + b} at once; rows(n) answers n records {"id", "group", "value"}.
Both declare their output (typed returns), so each side's code gets structured content.
"""

from typing_extensions import TypedDict  # pydantic needs this one before Python 3.12

from mcp.server.fastmcp import FastMCP

server = FastMCP("bench")


class Sum(TypedDict):
    sum: int


class Row(TypedDict):
    id: int
    group: int
    value: int


class Rows(TypedDict):
    rows: list[Row]


@server.tool()
def add(a: int, b: int) -> Sum:
    """The sum of a and b."""
    return {"sum": a + b}


@server.tool()
def rows(n: int) -> Rows:
    """n records with an id, a group (id mod 7) and a value."""
    return {"rows": [{"id": i, "group": i % 7, "value": (i * 7919) % 1000} for i in range(n)]}


if __name__ == "__main__":
    server.run()
