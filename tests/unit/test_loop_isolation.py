"""One bad row never stops a loop: the control cycle's steps (adapting attempts, advancing
stage-ins, closing group rounds) each go on with the other rows when one row raises. Each test
writes a row that cannot be read beside one whose step has a visible effect. A real store; the
site's adapter is a fake that records cancels."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from fedhpc.collector import Collector
from fedhpc.domain.job import JobState
from fedhpc.ops.tasks import GroupChild, SubmitGroupRequest
from fedhpc.orchestrator import staging
from fedhpc.orchestrator.records import TaskRecord
from fedhpc.orchestrator.service import Orchestrator
from fedhpc.store import Store
from tests.unit.attempts import attempt, put_attempt
from tests.unit.test_placement_world import NOW, cpu_partition, env, profile, site, state
from tests.unit.test_submit_accept import Clock, _req

S = site(profile("s", cpu_partition("p")))


class _Cancels:
    """The adapter surface a cancel uses."""

    def __init__(self) -> None:
        self.cancelled: list[str] = []

    async def cancel(self, job_ids: Sequence[str]) -> None:
        self.cancelled.extend(job_ids)


def _world(store: Store) -> tuple[Orchestrator, _Cancels]:
    adapter = _Cancels()
    clock = Clock()
    collector = Collector({"s": S}, {}, store, clock=clock)
    collector.latest["s"] = state(S.profile)
    collector.ready.set()
    o = Orchestrator(store, collector, {"s": cast(Any, adapter)}, clock=clock, retry_window_s=120)
    return o, adapter


async def _unreadable_attempt(store: Store, task_id: str) -> None:
    async with store.transaction() as tx:
        await tx.put_task(task_id, state="pending", body={"id": task_id}, at=NOW)
        await tx.put_attempt(
            task_id,
            1,
            site="s",
            partition="p",
            job_name=f"fedhpc-{task_id}-1",
            job_id="666",
            state="pending",
            body={"task_id": task_id, "state": "no such state"},
            at=NOW,
        )


async def test_an_unreadable_attempt_does_not_stop_a_cancel_owed_to_another(store: Store) -> None:
    o, adapter = _world(store)
    await _unreadable_attempt(store, "t0bad")  # sorts first: adapted first
    task = TaskRecord(id="t1", request=_req(), idempotency_key="k1", created_at=NOW)
    owed = attempt("t1", now=NOW, state=JobState.PENDING, superseded=True, cancel_pending=True)
    async with store.transaction() as tx:
        await tx.put_task("t1", state="pending", body=task.model_dump(mode="json"), at=NOW)
        await put_attempt(tx, owed, at=NOW)
    await o.adaptation.adapt_pending()
    assert adapter.cancelled == ["1"]
    assert not (await o.book.load_attempts("t1"))[0].cancel_pending


async def test_an_unreadable_staged_task_does_not_stop_another_stage_in(store: Store) -> None:
    o, _ = _world(store)
    async with store.transaction() as tx:
        bad = {"id": "t0bad", "request": {"stage_in": ["x1"], "command": 5}}
        await tx.put_task("t0bad", state="submitted", body=bad, at=NOW)
    task = TaskRecord(
        id="t1",
        request=_req(stage_in=["xmissing"]),
        idempotency_key="k1",
        created_at=NOW,
        state=JobState.SUBMITTED,
    )
    async with store.transaction() as tx:
        await tx.put_task("t1", state="submitted", body=task.model_dump(mode="json"), at=NOW)
    await staging.advance(o.book, lambda: None)
    ended = await o.book.load_task("t1")
    assert ended.state is JobState.FAILED  # its input can never arrive: it ends, and says so
    assert [e.kind for e in await store.events_after(0)] == ["task.stage_in_failed"]


async def test_a_group_that_cannot_be_read_does_not_keep_another_round_open(
    store: Store,
) -> None:
    o, _ = _world(store)
    for name in ("bad", "good"):
        children = tuple(GroupChild(command=("echo", name, str(i))) for i in range(2))
        req = SubmitGroupRequest(objective=name, children=children, envelope=env(cpus=1))
        await o.groups.submit(req, wait_s=0)
    groups = {}
    for gid in await store.groups_in(("running",)):
        row = await store.get_group(gid)
        assert row is not None
        groups[row["body"]["objective"]] = (gid, row)
    bad_gid, bad = groups["bad"]
    good_gid, _ = groups["good"]
    async with store.transaction() as tx:  # 'required' is not a list: reading it raises
        body = {**bad["body"], "required": 7}
        await tx.put_group(bad_gid, state="running", round_=1, body=body, at=NOW)
        for gid in (bad_gid, good_gid):
            for c in await store.group_children(gid):
                t = await o.book.load_task(c["id"])
                t.state = JobState.COMPLETED
                await o.book.save(tx, t, at=NOW)
    if bad_gid > good_gid:  # the bad group is advanced first whichever id it drew
        await o.groups.advance()
    await o.groups.advance()
    kinds = [(e.kind, e.subject) for e in await store.events_after(0)]
    assert ("group.round_terminal", good_gid) in kinds
    assert ("group.round_terminal", bad_gid) not in kinds
