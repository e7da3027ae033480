"""`fedhpc tasks` / GET /v1/tasks: newest first, each task's current attempt chosen as
get_result chooses it (the accepted one, else the newest not superseded, else the newest),
from one query at any store size (the plan uses an index, never a sort of the whole table)."""

from __future__ import annotations

import sqlite3
from datetime import timedelta

from fedhpc.domain.job import JobState, Shape
from fedhpc.orchestrator.records import AttemptRecord, TaskRecord
from fedhpc.store import Store
from tests.unit.test_placement_world import NOW
from tests.unit.test_submit_accept import Clock, _orchestrator, _req


async def _task(
    store: Store,
    tid: str,
    minute: int,
    state: JobState,
    atts: list[dict[str, object]],
    accepted: int | None = None,
) -> None:
    at = NOW + timedelta(minutes=minute)
    task = TaskRecord(
        id=tid,
        request=_req(name=tid),
        idempotency_key=tid,
        state=state,
        created_at=at,
        accepted_attempt=accepted,
        attempts_made=len(atts),
    )
    async with store.transaction() as tx:
        await tx.put_task(
            tid, state=state.value, body=task.model_dump(mode="json"), at=at, idempotency_key=tid
        )
        for n, kw in enumerate(atts, start=1):
            a = AttemptRecord(
                task_id=tid,
                n=n,
                site=str(kw["site"]),
                partition="cpu",
                account=None,
                qos=None,
                shape=Shape(),
                job_name=f"{tid}-{n}",
                job_id=str(n),
                created_at=at,
                superseded=bool(kw.get("superseded")),
            )
            await tx.put_attempt(
                tid,
                n,
                site=a.site,
                partition="cpu",
                job_name=a.job_name,
                job_id=a.job_id,
                state="completed",
                body=a.model_dump(mode="json"),
                at=at,
            )


async def test_newest_first_with_the_current_attempt_as_get_result_picks_it(
    store: Store,
) -> None:
    o = _orchestrator(store, Clock())
    await _task(store, "t-none", 0, JobState.QUEUED, [])
    await _task(
        store,
        "t-replaced",
        1,
        JobState.PENDING,
        [{"site": "old", "superseded": True}, {"site": "new"}],
    )
    await _task(
        store,
        "t-accepted",
        2,
        JobState.COMPLETED,
        [{"site": "first"}, {"site": "second"}],
        accepted=1,
    )
    await _task(
        store,
        "t-all-superseded",
        3,
        JobState.CANCELLED,
        [{"site": "a", "superseded": True}, {"site": "b", "superseded": True}],
    )
    rows = await o.tools.list_tasks(limit=10)
    assert [r.task_id for r in rows] == ["t-all-superseded", "t-accepted", "t-replaced", "t-none"]
    by = {r.task_id: r for r in rows}
    assert (by["t-accepted"].site, by["t-accepted"].job_id, by["t-accepted"].attempts) == (
        "first",
        "1",
        2,
    )
    assert by["t-replaced"].site == "new"
    assert by["t-all-superseded"].site == "b"
    assert (by["t-none"].site, by["t-none"].attempts, by["t-none"].name) == (None, 0, "t-none")
    assert [r.task_id for r in await o.tools.list_tasks(state="pending")] == ["t-replaced"]
    assert len(await o.tools.list_tasks(limit=2)) == 2


async def test_listing_queries_use_indexes_not_a_sort_of_the_table(store: Store) -> None:
    conn = sqlite3.connect(store.path)
    for sql, args in (
        ("SELECT * FROM tasks ORDER BY created_at DESC, id LIMIT 100", ()),
        ("SELECT * FROM tasks WHERE state = ? ORDER BY created_at DESC, id LIMIT 100", ("x",)),
        ("SELECT * FROM events WHERE seq > ? ORDER BY seq LIMIT 100", (5,)),
    ):
        plan = " ".join(str(r[3]) for r in conn.execute("EXPLAIN QUERY PLAN " + sql, args))
        assert "USING" in plan and "TEMP B-TREE" not in plan, (sql, plan)
    conn.close()
