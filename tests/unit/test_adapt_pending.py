"""adapt_pending: the cheap checks (attempt state, pending_since, the task's budget fields in
SQL) come before a task is loaded, so a cycle over thousands of pending attempts loads none
of those not yet due for re-placement."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, cast

from fedhpc.domain.envelope import ResourceEnvelope
from fedhpc.domain.job import JobState
from fedhpc.ops.tasks import AdaptationPolicy, SubmitTaskRequest
from fedhpc.orchestrator.adapt import _may_move
from fedhpc.orchestrator.records import TaskRecord
from fedhpc.orchestrator.service import Orchestrator
from fedhpc.store import Store
from tests.unit.attempts import attempt, put_attempt


async def _pending(store: Store, tid: str, *, now: datetime, since_s: float, used: int) -> None:
    """Task `tid` (default adaptation: re-place after 120 s, at most 2 times) with `used`
    re-placements spent, and its attempt 1 pending for `since_s` seconds."""
    task = TaskRecord(
        id=tid,
        idempotency_key=f"k:{tid}",
        state=JobState.PENDING,
        created_at=now,
        decision="placed",
        replacements_used=used,
        request=SubmitTaskRequest(command=("true",), envelope=ResourceEnvelope()),
    )
    att = attempt(
        tid, now=now, state=JobState.PENDING, pending_since=now - timedelta(seconds=since_s)
    )
    async with store.transaction() as tx:
        await tx.put_task(tid, state="pending", body=task.model_dump(mode="json"), at=now)
        await put_attempt(tx, att, at=now)


async def test_pending_attempts_not_due_do_not_load_their_tasks(store: Store) -> None:
    now = datetime(2026, 11, 29, tzinfo=UTC)
    await _pending(store, "tearly", now=now, since_s=10, used=0)  # due only after 120 s
    await _pending(store, "tspent", now=now, since_s=600, used=2)  # no re-placement left
    loaded: list[str] = []
    get_task = store.get_task

    async def counting_get_task(task_id: str) -> dict[str, Any] | None:
        loaded.append(task_id)
        return await get_task(task_id)

    store.get_task = counting_get_task  # type: ignore[method-assign]
    # Neither attempt is due: no site, planner or collector is consulted.
    o = Orchestrator(store, cast(Any, None), {}, clock=lambda: now)
    await o.adaptation.adapt_pending()
    assert loaded == []
    assert await store.events_after(0, limit=10) == []
    assert [a["state"] for a in await store.attempts("tearly")] == ["pending"]


def test_the_cheap_budget_check_honours_the_stored_policy_and_defaults_what_it_lacks() -> None:
    """_may_move reads the stored policy through AdaptationPolicy: a value set on the task wins,
    a field the stored dict lacks (or no policy at all) takes the model's default."""
    default = AdaptationPolicy()
    assert (default.replace_pending, default.max_replacements, default.replace_after_s) == (
        True,
        2,
        120.0,
    )
    quick = {"replace_after_s": 5.0}  # max_replacements and replace_pending missing
    assert _may_move({"adaptation": quick, "used": 0}, 10.0)  # 5 s, not the default 120 s
    assert _may_move({"adaptation": quick, "used": 1}, 10.0)
    assert not _may_move({"adaptation": quick, "used": 2}, 10.0)  # the default budget of 2
    assert not _may_move({"adaptation": {"replace_pending": False}, "used": 0}, 600.0)
    assert _may_move({"adaptation": {"max_replacements": 5}, "used": 4}, 600.0)
    assert not _may_move({"adaptation": None, "used": 0}, 119.0)  # the default 120 s
    assert _may_move({"adaptation": None, "used": 0}, 120.0)
    stored = AdaptationPolicy(replace_after_s=30.0).model_dump(mode="json")  # as tasks keep it
    assert _may_move({"adaptation": stored, "used": 0}, 30.0)
    assert not _may_move({"adaptation": stored, "used": 0}, 29.0)
