"""The hostile-input MCP tests' harness: a daemon and `fedhpc serve` on the local process
sites, and a tool call that must fail typed (or succeed) through the real MCP client."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp import Client

from tests.integration.daemon_util import running
from tests.integration.mcp_support import stdio_params


@asynccontextmanager
async def serve(tmp: Path) -> AsyncIterator[Client]:
    where = {"FEDHPC_DEVFED": "process", "FEDHPC_DEVFED_DIR": str(tmp / "devfed")}
    home = tmp / "h"
    async with (
        running(home, **where),
        Client(stdio_params(home, "--no-autostart", **where), mode="legacy") as client,
    ):
        yield client


async def call_error(client: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """The typed error a call answers: code, message and hint all non-empty."""
    result = await client.call_tool(tool, args)
    assert result.is_error, result.content
    body: dict[str, Any] = json.loads(result.content[0].text)  # type: ignore[union-attr]
    assert all(isinstance(body.get(k), str) and body[k] for k in ("code", "message", "hint"))
    return body


async def call_ok(client: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """The structured answer of a call that must succeed."""
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    body: dict[str, Any] = result.structured_content  # a tool's structured answer: an object
    return body
