"""One bad row never stops a loop: the control cycle's steps (adapting attempts, advancing
stage-ins, closing group rounds) and the resume bridge (routing events, checking and
delivering resumes) each go on with the other rows when one row raises. Each test
writes a row that cannot be read beside one whose step has a visible effect. A real store; the
site's adapter is a fake that records cancels."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from fedhpc.bridge.service import Bridge
from fedhpc.collector import Collector
from fedhpc.domain.job import JobState
from fedhpc.ops.continuations import ContinuationSpec, Runtime
from fedhpc.ops.tasks import GroupChild, SubmitGroupRequest
from fedhpc.orchestrator import staging
from fedhpc.orchestrator.records import TaskRecord
from fedhpc.orchestrator.service import Orchestrator
from fedhpc.store import Store
from fedhpc.store.continuations import put_continuation
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
    await o.adaptation.adapt_pending()  # finds the cancel owed past the unreadable row
    await o.adaptation.cancels.send(o.adaptation.owed)
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


async def _inbox_task(store: Store, task_id: str, inbox: str) -> None:
    spec = ContinuationSpec(runtime=Runtime.INBOX, inbox=inbox, events=("task.terminal",))
    async with store.transaction() as tx:
        await tx.put_task(task_id, state="completed", body={"id": task_id}, at=NOW)
        await put_continuation(tx, task_id, spec, at=NOW)


async def test_an_event_whose_payload_cannot_be_built_is_still_delivered_and_others_too(
    store: Store, tmp_path: Path
) -> None:
    await _inbox_task(store, "ta", "a")
    await _inbox_task(store, "tb", "b")
    async with store.transaction() as tx:  # task_ids must be a list: building its payload raises
        odd = {"task_id": "ta", "state": "completed", "task_ids": 5}
        await tx.append_event("task.terminal", "ta", odd, at=NOW, key="task.terminal:ta")
        fine = {"task_id": "tb", "state": "completed"}
        await tx.append_event("task.terminal", "tb", fine, at=NOW, key="task.terminal:tb")
    bridge = Bridge(store, tmp_path, clock=lambda: NOW)
    assert await bridge.route() == 2
    await bridge.deliver()
    a = [json.loads(x) for x in (tmp_path / "inbox" / "a.jsonl").read_text().splitlines()]
    b = [json.loads(x) for x in (tmp_path / "inbox" / "b.jsonl").read_text().splitlines()]
    assert (a[0]["event"], a[0]["task_id"], a[0]["state"]) == ("task.terminal", "ta", "completed")
    assert b[0]["task_id"] == "tb"


async def test_a_started_resume_that_cannot_be_read_does_not_stop_another_sessions_delivery(
    store: Store, tmp_path: Path
) -> None:
    await _inbox_task(store, "tb", "b")
    async with store.transaction() as tx:
        fine = {"task_id": "tb", "state": "completed"}
        await tx.append_event("task.terminal", "tb", fine, at=NOW, key="task.terminal:tb")
    bridge = Bridge(store, tmp_path, clock=lambda: NOW)
    assert await bridge.route() == 1
    async with store.transaction() as tx:  # session a's resume in flight, its record broken
        await tx.put_delivery(
            "d0-broken",
            event_id="e-none",
            continuation_id="c-none",
            state="started",
            attempts=0,
            next_at=NOW,
            at=NOW,
            body={"resume": "r0", "key": "session:a"},  # no spec: reading it raises
        )
    await bridge.deliver()
    states = {d["id"]: d["state"] for d in await store.deliveries()}
    assert states["d0-broken"] == "started"  # kept busy: no second resume into session a
    assert [s for i, s in states.items() if i != "d0-broken"] == ["delivered"]
    assert (tmp_path / "inbox" / "b.jsonl").exists()


class _Answers:
    """A site adapter whose probe answers `answer` (or raises it)."""

    def __init__(self, answer: object) -> None:
        self.answer = answer

    async def probe(self, *, timeout_s: float) -> object:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


async def test_a_site_whose_probe_answer_cannot_be_read_is_offline_alone(store: Store) -> None:
    good = site(profile("good", cpu_partition("p")))
    odd = site(profile("odd", cpu_partition("p")))
    bug = site(profile("bug", cpu_partition("p")))
    adapters = {
        "good": _Answers(state(good.profile)),
        "odd": _Answers("not a site state"),
        "bug": _Answers(KeyError("partition")),
    }
    sites = {"good": good, "odd": odd, "bug": bug}
    col = Collector(sites, cast(Any, adapters), store, clock=lambda: NOW)
    report = await col.refresh(force=True)
    assert set(report.probed) == {"good", "odd", "bug"}
    assert col.latest["good"].health is state(good.profile).health
    assert col.latest["odd"].health.value == "offline"
    assert "probe answer unreadable (AttributeError" in str(col.latest["odd"].error)
    assert "probe failed: 'partition'" in str(col.latest["bug"].error)
    assert col.ready.is_set()
