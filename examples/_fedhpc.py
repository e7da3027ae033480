"""Shared by the examples: start `fedhpc serve` with the real MCP client, call a tool, and wait
for an event the way a pull client does (`list_events`).

A coding agent (Claude Code, Codex) does not wait like this: it ends its turn after submitting
and fedhpc resumes it (docs/continuation.md). A script has no turn to end, so it pulls the
event log instead; it never asks the schedulers for status."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

__all__ = ["call", "connect", "latest_seq", "wait_for"]


def connect(**env: str) -> Client:
    """`fedhpc serve` over stdio; it starts the daemon when none answers on FEDHPC_HOME.

    FEDHPC_DEVFED=1 selects the local federation (four Slurm clusters on this machine)."""
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "fedhpc.cli.main", "serve"],
        env={**os.environ, "FEDHPC_DEVFED": os.environ.get("FEDHPC_DEVFED", "1"), **env},
    )
    return Client(server, mode="legacy")  # the handshake Claude Code and Codex use


async def call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    """A tool's structured answer; a tool error ({code, message, hint}) ends the example."""
    result = await client.call_tool(tool, args)
    if result.is_error or result.structured_content is None:
        text = " ".join(getattr(c, "text", "") for c in result.content)
        raise SystemExit(f"{tool} failed: {text}")
    return dict(result.structured_content)


async def latest_seq(client: Client) -> int:
    """The newest event's sequence number: wait only for what happens after it."""
    after = 0
    while True:
        page = await call(client, "list_events", after=after, limit=200)
        after = page["next_after"]
        if not page["more"]:
            return int(after)


async def wait_for(
    client: Client, subject: str, kinds: set[str], *, after: int, timeout_s: float = 600
) -> dict[str, Any]:
    """The first event of one of `kinds` about `subject` (a task, group or transfer id)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        page = await call(client, "list_events", after=after, limit=200)
        for event in page["events"]:
            if event["subject"] == subject and event["kind"] in kinds:
                return event
        after = page["next_after"]
        if not page["more"]:
            await anyio.sleep(1)
    raise SystemExit(f"no {sorted(kinds)} event for {subject} within {timeout_s:.0f} s")
