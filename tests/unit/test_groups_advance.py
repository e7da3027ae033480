"""Closing a group's round: never before submit_group has added every child."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

from fedhpc.orchestrator.service import Orchestrator
from fedhpc.store import Store


async def test_a_group_whose_children_are_still_being_submitted_stays_open(store: Store) -> None:
    """A control cycle can run between submit_group writing the group and its first child (the
    daemon's lock is per operation): an empty child list must not read as 'all done'."""
    now = datetime(2026, 11, 29, tzinfo=UTC)
    async with store.transaction() as tx:
        await tx.put_group(
            "g1",
            state="running",
            round_=1,
            at=now,
            body={"objective": "x", "key": "k", "required": [True] * 4, "spread": True},
        )
    # advance_groups reads only the store and the clock: no site is involved.
    o = Orchestrator(store, cast(Any, None), {}, clock=lambda: now)
    await o.groups.advance()
    assert await store.events_after(0, limit=10) == []
    group = await store.get_group("g1")
    assert group is not None
    assert group["state"] == "running"
