"""Event cursors: the daemon's own consumers are not for agents; hints never suggest a replan
that would be refused."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from fedhpc.bridge import build_payload
from fedhpc.bridge.service import Bridge
from fedhpc.ops.continuations import DEFAULT_WAKE_EVENTS
from fedhpc.ops.events import INTERNAL_CONSUMERS, ReservedConsumer, check_consumer
from fedhpc.store import Store


@pytest.mark.parametrize("name", ["bridge", "BRIDGE", "fedhpc", "fedhpc-cli", "FedHPC.x"])
def test_the_daemons_own_cursors_are_refused_by_name(name: str) -> None:
    with pytest.raises(ReservedConsumer) as exc:
        check_consumer(name)
    assert exc.value.code == "reserved_consumer"
    assert exc.value.hint


def test_the_bridge_consumer_is_reserved_and_a_client_name_is_not() -> None:
    assert Bridge.CONSUMER in INTERNAL_CONSUMERS
    check_consumer("my-agent")  # no error


async def test_last_seq_and_last_event_read_the_log(store: Store) -> None:
    at = datetime(2026, 11, 30, tzinfo=UTC)
    assert await store.last_seq() == 0
    assert await store.last_event("site.offline", "devvista") is None
    async with store.transaction() as tx:
        await tx.append_event("site.offline", "devvista", {"site": "devvista"}, at=at, key="a")
        await tx.append_event("site.online", "devvista", {"site": "devvista"}, at=at, key="b")
        await tx.append_event("site.offline", "devvista", {"site": "devvista"}, at=at, key="c")
    last = await store.last_event("site.offline", "devvista")
    assert last is not None
    assert last.seq == 3 == await store.last_seq()


def _event(kind: str) -> dict[str, object]:
    return {
        "kind": kind,
        "id": "ev1",
        "subject": "t1",
        "seq": 1,
        "created_at": datetime(2026, 11, 30, tzinfo=UTC).isoformat(),
        "payload": {"task_id": "t1", "state": "failed", "result": "fedhpc://tasks/t1"},
    }


@pytest.mark.parametrize("kind", DEFAULT_WAKE_EVENTS)
def test_every_wake_event_has_its_own_next_steps(kind: str) -> None:
    steps = build_payload(_event(kind), [], delivery_id="d1")["next"]
    assert steps != ["get_result(task_id)"]  # not the generic fallback
    if kind in {"task.retry_exhausted", "task.terminal", "task.stage_in_failed"}:
        assert not any(s.startswith("replan") for s in steps)  # replan refuses ended tasks


async def test_a_task_reopened_by_replan_reports_its_new_outcome_as_a_new_event(
    store: Store,
) -> None:
    """Event ids come from their meaning (a retried write never duplicates one); after a replan
    reopened an unschedulable task, the same kind of outcome is a new fact and must wake."""
    from typing import Any, cast

    from fedhpc.domain import JobState, ResourceEnvelope
    from fedhpc.ops.tasks import SubmitTaskRequest
    from fedhpc.orchestrator.records import TaskRecord
    from fedhpc.orchestrator.service import Orchestrator

    at = datetime(2026, 11, 30, tzinfo=UTC)
    o = Orchestrator(store, cast(Any, None), {}, clock=lambda: at)
    env = ResourceEnvelope.model_validate({"wall_time": {"min": "5m"}})
    task = TaskRecord(
        id="t1",
        idempotency_key="k",
        created_at=at,
        state=JobState.UNSCHEDULABLE,
        request=SubmitTaskRequest(command=("true",), envelope=env),
    )
    for _ in range(2):  # the same fact twice: one event
        async with store.transaction() as tx:
            await o.book.emit(tx, "task.unschedulable", task, reason="r")
    task.reopened = 1
    async with store.transaction() as tx:
        await o.book.emit(tx, "task.unschedulable", task, reason="r")
    kinds = [e.kind for e in await store.events_after(0, limit=10)]
    assert kinds == ["task.unschedulable", "task.unschedulable"]
