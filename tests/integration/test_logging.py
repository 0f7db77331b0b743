"""MCP logging: a server warning about a request (here, an upstream server that is unavailable) reaches a client
that opted in, as notifications/message before the answer: by logging/setLevel on a legacy session, or by the
request's logLevel (2026-07-28); a client that did not opt in gets none."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from test_upstream import call, params_for

pytestmark = pytest.mark.anyio

SERVERS = {"missing": {"command": "cem-no-such-server-binary"}}


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def search_with(params, **client_args) -> tuple[dict, list]:
    messages: list = []

    async def got(message):
        messages.append(message)

    async with Client(params, logging_callback=got, **client_args) as client:
        if client_args.get("mode") == "legacy":
            await client.set_logging_level("warning")
        found = await call(client, "search_tools", {"query": "anything"})
    return found, messages


async def test_an_unavailable_upstream_is_a_warning_to_clients_that_asked(data_dir: Path, tmp_path: Path):
    params = params_for(data_dir, tmp_path, SERVERS)
    for client_args in ({"mode": "legacy"}, {"log_level": "warning"}):
        found, messages = await search_with(params, **client_args)
        assert [u["server"] for u in found["unavailable"]] == ["missing"], found
        assert len(messages) == 1, (client_args, messages)
        [message] = messages
        assert message.level == "warning" and message.logger == "code-execution-mcp", message
        assert message.data["tool"] == "search_tools"
        assert "upstream server missing is unavailable" in message.data["message"], message
    # Above warning only: nothing at error.
    _, messages = await search_with(params, log_level="error")
    assert messages == []
    # No opt-in, no messages.
    _, messages = await search_with(params)
    assert messages == []
