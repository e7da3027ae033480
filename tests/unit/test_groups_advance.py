"""Closing a group's round: never before submit_group has added every child; an unknown
group id is a typed not_found that says where group ids are found."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, cast

import anyio
import pytest

from fedhpc.domain.job import JobState
from fedhpc.orchestrator import TaskNotFound
from fedhpc.orchestrator.records import job_name
from fedhpc.orchestrator.service import Orchestrator
from fedhpc.store import Store
from tests.unit.attempts import attempt, put_attempt


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


async def test_advance_reads_only_the_live_child_of_a_mostly_finished_group(store: Store) -> None:
    """50 children completed, one just queued: a control cycle reads that one child (the counts
    come from SQL), never the finished ones; when it ends, the round closes reading none."""
    now = datetime(2026, 11, 29, tzinfo=UTC)
    n = 51
    async with store.transaction() as tx:
        await tx.put_group(
            "g1",
            state="running",
            round_=1,
            at=now,
            body={"objective": "x", "key": "k", "required": [True] * n, "spread": True},
        )
        for i in range(n):
            tid, last = f"t1-{i:02d}", i == n - 1
            state = JobState.PENDING if last else JobState.COMPLETED
            await tx.put_task(
                tid, state=state.value, body={}, at=now, idempotency_key=f"k:{i}", group_id="g1"
            )
            pending_since = now if last else None
            att = attempt(tid, now=now, state=state, job_id=str(i), pending_since=pending_since)
            await put_attempt(tx, att, at=now)
    read: list[str] = []
    tasks_loaded: list[str] = []
    children, get_task = store.group_children, store.get_task

    async def counting_children(
        group_id: str,
        *,
        after: str | None = None,
        limit: int | None = None,
        acting: Sequence[str] = (),
    ) -> list[dict[str, Any]]:
        rows = await children(group_id, after=after, limit=limit, acting=acting)
        if limit is None:  # unbounded reads (a round's answer reads a page of one)
            read.extend(str(c["id"]) for c in rows)
        return rows

    async def counting_get_task(task_id: str) -> dict[str, Any] | None:
        tasks_loaded.append(task_id)
        return await get_task(task_id)

    store.group_children = counting_children  # type: ignore[method-assign]
    store.get_task = counting_get_task  # type: ignore[method-assign]
    o = Orchestrator(store, cast(Any, None), {}, clock=lambda: now)
    await o.groups.advance()
    assert read == ["t1-50"]  # the live child alone: none of the 50 finished ones
    assert tasks_loaded == []
    assert await store.events_after(0, limit=10) == []
    group = await store.get_group("g1")
    assert group is not None and group["state"] == "running"

    async with store.transaction() as tx:
        await tx.put_task("t1-50", state=JobState.COMPLETED.value, body={}, at=now)
        await tx.put_attempt(
            "t1-50",
            1,
            site="s",
            partition="p",
            job_name=job_name("t1-50", 1),
            job_id="50",
            state=JobState.COMPLETED.value,
            body={},
            at=now,
        )
    read.clear()
    await o.groups.advance()
    assert read == []  # every child finished: the counts alone close the round
    group = await store.get_group("g1")
    assert group is not None and group["state"] == "completed"
    events = await store.events_after(0, limit=10)
    assert [e.kind for e in events] == ["group.round_terminal"]


async def test_an_unknown_group_id_says_where_group_ids_are_found(store: Store) -> None:
    """No command or tool lists groups: the hint must not send the caller to one that would."""
    o = Orchestrator(store, cast(Any, None), {}, clock=lambda: datetime(2026, 11, 29, tzinfo=UTC))
    with pytest.raises(TaskNotFound) as caught:
        await o.groups.view("gnope")
    assert caught.value.as_dict() == {
        "code": "not_found",
        "message": "no group 'gnope'",
        "hint": "No command or tool lists groups: use the group_id in submit_group's answer, "
        "or find it in the GROUP column of `fedhpc tasks` or in a child's get_result (group_id).",
    }


async def test_a_group_view_sends_its_three_reads_to_the_store_at_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The group, its counts and a page of children are read together (one wait for the
    reader's thread, not three): each read here is held until all three have arrived, which
    one read after the other would never reach."""
    now = datetime(2026, 11, 29, tzinfo=UTC)
    async with store.transaction() as tx:
        await tx.put_group("g1", state="running", round_=1, at=now, body={"objective": "x"})
    arrived, everyone = [0], anyio.Event()
    real = type(store)._all

    async def held(self: Store, sql: str, params: Any = ()) -> Any:
        arrived[0] += 1
        if arrived[0] == 3:
            everyone.set()
        await everyone.wait()
        return await real(self, sql, params)

    monkeypatch.setattr(type(store), "_all", held)
    o = Orchestrator(store, cast(Any, None), {}, clock=lambda: now)
    with anyio.fail_after(10):
        view = await o.groups.view("g1", limit=10)
    assert (view.group_id, view.size, arrived[0]) == ("g1", 0, 3)
