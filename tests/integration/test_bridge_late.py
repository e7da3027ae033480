"""A redriven dead letter says it is late: the payload carries the event's time and the
session's events that reached the agent before it (a private store, a command runtime; no
Slurm federation)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

from fedhpc.bridge.service import Bridge
from fedhpc.ops.continuations import ContinuationSpec, Runtime
from fedhpc.store import Store


async def _settle(bridge: Bridge, store: Store, state: str, n: int) -> list[dict[str, Any]]:
    with anyio.fail_after(30):
        while len(found := [d for d in await store.deliveries() if d["state"] == state]) < n:
            await bridge.cycle()
            await anyio.sleep(0.1)
    return found


async def test_a_redriven_dead_letter_says_when_its_event_was_and_what_came_after(
    tmp_path: Path,
) -> None:
    log, broken = tmp_path / "agent.log", tmp_path / "broken"
    # The "agent": fails while `broken` exists, else appends what it was woken with.
    script = 'test -e "$2" && exit 3; cat >> "$1"; echo >> "$1"'
    spec = ContinuationSpec(
        runtime=Runtime.COMMAND, command=("bash", "-c", script, "agent", str(log), str(broken))
    )
    home = tmp_path / "h"
    store = await Store.open(home / "fedhpc.db")
    bridge = Bridge(store, home, max_attempts=1, backoff_s=0.1, poll_s=0.1)
    body = spec.model_dump(mode="json")
    try:
        broken.write_text("")
        first_at = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
        async with store.transaction() as tx:  # two tasks, one agent (one queue)
            for task in ("t1", "t2"):
                await tx.put_continuation(
                    f"c{task}", subject=task, runtime="command", body=body, at=first_at
                )
            await tx.append_event(
                "task.terminal", "t1", {"task_id": "t1", "state": "failed"}, at=first_at
            )
        (dead,) = await _settle(bridge, store, "dead", 1)
        broken.unlink()
        async with store.transaction() as tx:
            await tx.append_event(
                "task.terminal", "t2", {"task_id": "t2", "state": "completed"}, at=first_at
            )
        (newer,) = await _settle(bridge, store, "delivered", 1)
        assert await bridge.redrive(None) == [dead["id"]]
        await _settle(bridge, store, "delivered", 2)
    finally:
        await store.close()
    lines = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
    assert [x["task_id"] for x in lines] == ["t2", "t1"]  # the late one after the newer one
    assert "late" not in lines[0]
    late = lines[1]["late"]
    assert late["event_at"].startswith("2026-12-01T09:30:00")
    assert late["after"] == [newer["id"]]
    assert "delivered late" in late["note"]
    assert len(json.dumps(lines[1])) < 1024
