"""Pulling events and re-placing an unschedulable task over stdio (`fedhpc serve`, the real
MCP client) against a real daemon on the local federation: list_events honours a consumer's
acknowledged position, nobody outside the daemon moves the bridge's cursor, and replan places
a task that was unschedulable once its envelope fits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from fedhpc.errors import FedError
from fedhpc.store import Store
from tests.integration.daemon_util import running
from tests.integration.mcp_support import stdio_params

pytestmark = pytest.mark.devfed

TOO_BIG = {"gpus": {"min": 64}, "wall_time": {"min": "5m"}}  # no node holds 64 GPUs
# replan replaces only the fields given (docs/mcp.md): the GPUs are given back as none.
FITS = {"gpus": {"min": 0, "max": 0}, "cpus": {"min": 1}, "wall_time": {"min": "5m"}}


async def _ok(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    body: dict[str, Any] = result.structured_content  # a tool's structured answer: an object
    return body


async def _error(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert result.is_error
    body: dict[str, Any] = json.loads(result.content[0].text)  # type: ignore[union-attr]
    return body


async def _state(client: Client, task_id: str) -> str:
    return str((await _ok(client, "get_result", task_id=task_id))["state"])


async def test_replan_places_an_unschedulable_task_once_its_envelope_fits(
    devfed: Any, tmp_path: Path
) -> None:
    home = tmp_path / "h"
    async with running(home), Client(stdio_params(home, "--no-autostart"), mode="legacy") as c:
        handle = await _ok(c, "submit_task", command=["true"], envelope=TOO_BIG, name="big")
        task_id = handle["task_id"]
        with anyio.fail_after(60):
            while (state := await _state(c, task_id)) != "unschedulable":
                assert state in {"submitted", "placing"}, state
                await anyio.sleep(0.3)
        # Still impossible: refused, and nothing about the task changes.
        bigger = {**TOO_BIG, "nodes": {"min": 1}}
        still = await _error(c, "replan", task_id=task_id, envelope=bigger)
        assert still["code"] == "usage"
        assert "no feasible placement" in still["message"]
        assert await _state(c, task_id) == "unschedulable"
        moved = await _ok(c, "replan", task_id=task_id, envelope=FITS)
        assert moved["task_id"] == task_id
        assert moved["site"]  # placed; its job id follows (answered on placement)
        with anyio.fail_after(120):
            while (state := await _state(c, task_id)) != "completed":
                assert state not in {"failed", "unschedulable", "cancelled"}, state
                await anyio.sleep(0.5)
        kinds = [(e["kind"], e["subject"]) for e in (await _ok(c, "list_events"))["events"]]
    assert kinds == [("task.unschedulable", task_id), ("task.terminal", task_id)]


async def test_list_events_skips_what_a_consumer_acknowledged_and_the_bridge_cursor_is_private(
    devfed: Any, tmp_path: Path
) -> None:
    home = tmp_path / "h"
    async with (
        running(home) as rest_client,
        Client(stdio_params(home, "--no-autostart"), mode="legacy") as c,
    ):
        ids = [
            (
                await _ok(
                    c, "submit_task", command=["true"], envelope=TOO_BIG, idempotency_key=f"e{i}"
                )
            )["task_id"]
            for i in range(3)
        ]
        with anyio.fail_after(60):
            while len((page := await _ok(c, "list_events", consumer="me"))["events"]) < 3:
                await anyio.sleep(0.3)
        seqs = [e["seq"] for e in page["events"]]
        assert [e["subject"] for e in page["events"]] == ids
        acked = await _ok(c, "ack_events", consumer="me", through=seqs[0])
        assert acked["cursor"] == seqs[0]
        rest = await _ok(c, "list_events", consumer="me")
        assert [e["seq"] for e in rest["events"]] == seqs[1:]
        assert rest["next_after"] == seqs[-1]
        # another consumer, and a reader without one, still see everything
        assert len((await _ok(c, "list_events", consumer="other"))["events"]) == 3
        assert len((await _ok(c, "list_events"))["events"]) == 3
        # an explicit `after` beyond the stored position still applies
        assert [
            e["seq"] for e in (await _ok(c, "list_events", consumer="me", after=seqs[1]))["events"]
        ] == seqs[2:]
        # acknowledging the future is clamped to the newest event
        far = await _ok(c, "ack_events", consumer="me", through=10**12)
        assert far["cursor"] == seqs[-1]
        assert (await _ok(c, "list_events", consumer="me"))["events"] == []
        for name in ("bridge", "Bridge", "fedhpc-bridge"):
            err = await _error(c, "ack_events", consumer=name, through=seqs[-1])
            assert err["code"] == "reserved_consumer", err
            assert err["hint"]
        with pytest.raises(FedError) as refused:  # the daemon refuses it too, not only MCP
            await rest_client.ack_events("bridge", seqs[-1])
        assert refused.value.code == "reserved_consumer"
    # Nothing outside the daemon moved the bridge's cursor: its own routing did, and only to
    # events it routed.
    store = await Store.open(home / "fedhpc.db")
    try:
        bridge = await store.cursor("bridge")
        assert bridge <= seqs[-1]
        assert await store.cursor("Bridge") == 0
        assert await store.cursor("fedhpc-bridge") == 0
    finally:
        await store.close()
