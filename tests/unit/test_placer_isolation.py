"""One session's bad task never stops anyone else's: what placement would refuse is refused at
the door (submit, group, replan) with the field named, and a task whose placement raises
anyway (a row an older version accepted, a bug) ends alone with its reason and wakes its
agent while the pass places the rest. A real store and real placement; the site's adapter is
a fake that accepts every submission."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import pytest

from fedhpc.adapters.site import SubmittedJob
from fedhpc.domain.config import Site
from fedhpc.domain.job import JobSpec, JobState
from fedhpc.errors import ValidationFailed
from fedhpc.ops.tasks import GroupChild, ReplanRequest, SubmitGroupRequest
from fedhpc.orchestrator.records import TaskRecord
from fedhpc.orchestrator.service import Orchestrator
from fedhpc.placement import Placement, Unschedulable
from fedhpc.store import Store
from tests.unit.fake_submit import SubmitsOneByOne
from tests.unit.test_placement_world import NOW, cpu_partition, env, profile, site, state
from tests.unit.test_submit_accept import Clock, _req

ALPHA = site(profile("alpha", cpu_partition("cpu"), cpu_partition("big")))


class _Accepts(SubmitsOneByOne):
    """The adapter surface dispatch uses; every submission gets the next job id."""

    login = "alice"
    roots: dict[str, str] = {}  # noqa: RUF012  (its profile names no $NAME root)
    name = "alpha"
    dialect = None  # no start-estimate command: placement uses its own estimates

    def __init__(self, s: Site) -> None:
        self.site = s
        self.submitted: list[JobSpec] = []

    def root_path(self, path: str) -> str:
        return path

    async def submit(self, spec: JobSpec, *, ensure_dirs: Sequence[str] = ()) -> SubmittedJob:
        self.submitted.append(spec)
        return SubmittedJob(site="alpha", job_id=str(len(self.submitted)), script="")


def _world(store: Store) -> tuple[Orchestrator, _Accepts]:
    from fedhpc.collector import Collector

    adapter = _Accepts(ALPHA)
    clock = Clock()
    collector = Collector({"alpha": ALPHA}, {}, store, clock=clock)
    collector.latest["alpha"] = state(ALPHA.profile)
    collector.ready.set()
    o = Orchestrator(
        store, collector, {"alpha": cast(Any, adapter)}, clock=clock, retry_window_s=120
    )
    return o, adapter


@pytest.mark.parametrize(
    ("envelope", "field"),
    [
        ({"memory": {"min": 1, "max": 1}}, "envelope.memory.min"),
        ({"wall_time": {"min": 30, "max": 30}}, "envelope.wall_time.min"),
        ({"wall_time": {"min": 1}}, "envelope.wall_time.min"),
        ({"preferences": {"partitions": ["cpu"]}}, "envelope.preferences.partitions[0]"),
        ({"preferences": {"partitions": ["nosite/x"]}}, "envelope.preferences.partitions[0]"),
        ({"preferences": {"partitions": ["alpha/gpu"]}}, "envelope.preferences.partitions[0]"),
        (
            {"preferences": {"sites": ["alpha"]}, "sites_exclude": ["alpha"]},
            "envelope.preferences.sites[0]",
        ),
        ({"container": {"image": "x.sif", "runtimes": []}}, "envelope.container.runtimes"),
    ],
)
async def test_what_placement_would_refuse_is_a_typed_error_at_submit_naming_the_field(
    store: Store, envelope: dict[str, Any], field: str
) -> None:
    o, _ = _world(store)
    body = {"cpus": {"min": 1}, "wall_time": {"min": 600}} | envelope
    with pytest.raises(ValidationFailed) as caught:
        await o.intake.submit_task(_req(envelope=body), wait_s=0)
    assert caught.value.code == "validation"
    assert field in [i.field for i in caught.value.issues], caught.value.message
    group = SubmitGroupRequest.model_validate(
        {"objective": "x", "children": [{"command": ["true"]}], "envelope": body}
    )
    with pytest.raises(ValidationFailed):
        await o.groups.submit(group, wait_s=0)
    assert await store.queued_tasks(100) == []  # nothing was kept of either


async def test_a_memory_slip_names_the_fix_and_the_smallest_node(store: Store) -> None:
    o, _ = _world(store)
    with pytest.raises(ValidationFailed) as caught:
        await o.intake.submit_task(_req(envelope={"memory": {"min": 1}}), wait_s=0)
    assert "'1G'" in caught.value.message
    assert "the smallest node here has" in caught.value.message


async def test_a_replan_to_an_envelope_placement_would_refuse_is_refused_and_changes_nothing(
    store: Store,
) -> None:
    o, _ = _world(store)
    handle = await o.intake.submit_task(_req(envelope=env(cpus=1)), wait_s=0)
    task = await o.book.load_task(handle.task_id)
    task.state = JobState.UNSCHEDULABLE  # reopenable by replan
    async with store.transaction() as tx:
        await o.book.save(tx, task, at=NOW)
    req = ReplanRequest.model_validate(
        {"task_id": handle.task_id, "envelope": {"memory": {"min": 2}}}
    )
    with pytest.raises(ValidationFailed) as caught:
        await o.tools.replan(req)
    assert "envelope.memory.min" in caught.value.message
    assert (await o.book.load_task(handle.task_id)).request.envelope == task.request.envelope


async def test_a_task_whose_placement_raises_fails_alone_and_wakes_its_agent(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    o, adapter = _world(store)
    handles = [
        await o.intake.submit_task(_req(command=["echo", str(i)]), wait_s=0) for i in range(5)
    ]
    bad = handles[1].task_id
    decide = o.planner.decide

    async def decide_or_raise(task: TaskRecord, **kw: Any) -> Placement | Unschedulable:
        if task.id == bad:
            raise RuntimeError("a bug in placement")
        return await decide(task, **kw)

    monkeypatch.setattr(o.planner, "decide", decide_or_raise)
    assert await o.place_queued() == 4
    assert len(adapter.submitted) == 4
    failed = await o.book.load_task(bad)
    assert failed.state is JobState.FAILED
    assert (
        "internal error while placing it (RuntimeError: a bug in placement)" in (failed.reasons[0])
    )
    for h in handles:
        if h.task_id != bad:
            assert (await o.book.load_task(h.task_id)).state is JobState.SUBMITTED
    events = [(e.kind, e.subject) for e in await store.events_after(0)]
    assert events == [("task.retry_exhausted", bad)]  # its agent is woken, once
    assert await o.place_queued() == 0  # the next pass does not see it again


async def test_a_run_of_siblings_whose_decision_raises_fails_that_group_only(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    o, _adapter = _world(store)
    children = tuple(GroupChild(command=("echo", str(i))) for i in range(3))
    req = SubmitGroupRequest(
        objective="sweep", children=children, envelope=env(cpus=1), spread=False
    )
    gid = (await o.groups.submit(req, wait_s=0)).group_id
    other = await o.intake.submit_task(_req(), wait_s=0)

    async def raises(*_a: Any, **_kw: Any) -> list[Placement | Unschedulable]:
        raise KeyError("partition")

    monkeypatch.setattr(o.planner, "decide_children", raises)
    assert await o.place_queued() == 1
    assert (await o.book.load_task(other.task_id)).state is JobState.SUBMITTED
    states = {c["state"] for c in await store.group_children(gid)}
    assert states == {"failed"}


async def test_a_stored_task_placement_refuses_is_unschedulable_with_the_field(
    store: Store,
) -> None:
    """A row written before the door checked it (an older version): 1 MiB of memory."""
    o, _adapter = _world(store)
    old = TaskRecord(
        id="told",
        request=_req(envelope={"memory": {"min": 1}}),
        idempotency_key="k-old",
        created_at=NOW,
    )
    async with store.transaction() as tx:
        await tx.put_task(old.id, state="queued", body=old.model_dump(mode="json"), at=NOW)
    fine = await o.intake.submit_task(_req(), wait_s=0)
    assert await o.place_queued() == 1
    assert (await o.book.load_task(fine.task_id)).state is JobState.SUBMITTED
    task = await o.book.load_task("told")
    assert task.state is JobState.UNSCHEDULABLE
    assert "memory.min: 1 MiB looks like a unit slip" in task.reasons[0]
    kinds = [(e.kind, e.subject) for e in await store.events_after(0)]
    assert kinds == [("task.unschedulable", "told")]


async def test_an_unreadable_queued_row_leaves_the_queue_as_failed_and_wakes_its_agent(
    store: Store,
) -> None:
    o, _adapter = _world(store)
    async with store.transaction() as tx:
        await tx.put_task("tbroken", state="queued", body={"id": "tbroken", "request": 5}, at=NOW)
    fine = await o.intake.submit_task(_req(), wait_s=0)
    assert await o.place_queued() == 1
    assert (await o.book.load_task(fine.task_id)).state is JobState.SUBMITTED
    row = await store.get_task("tbroken")
    assert row is not None and row["state"] == "failed"
    assert "cannot be read" in row["body"]["reasons"][0]
    events = await store.events_after(0)
    assert [(e.kind, e.subject) for e in events] == [("task.retry_exhausted", "tbroken")]


@pytest.mark.parametrize(
    ("field", "body"),
    [
        ("envelope.gpus.min", {"envelope": {"gpus": {"min": True, "max": True}}}),
        ("envelope.cpus.min", {"envelope": {"cpus": {"min": "10"}}}),
        ("envelope.cpus.min", {"envelope": {"cpus": {"min": " 5 "}}}),
        ("envelope.nodes.max", {"envelope": {"nodes": {"min": 1, "max": "010"}}}),
        ("envelope.gpus.max", {"envelope": {"gpus": {"min": 1, "max": 2.0}}}),
        ("envelope.memory.min", {"envelope": {"memory": {"min": 0.5}}}),
        ("envelope.memory.min", {"envelope": {"memory": {"min": 5e-324}}}),
        ("envelope.wall_time.min", {"envelope": {"wall_time": {"min": "99:99:99"}}}),
        ("envelope.wall_time.min", {"envelope": {"wall_time": {"min": "1-25:00:00"}}}),
        ("task_budget", {"envelope": {}, "task_budget": True}),
        ("adaptation.max_retries", {"envelope": {}, "adaptation": {"max_retries": "3"}}),
        (
            "envelope.min_accelerator_memory_gib",
            {"envelope": {"gpus": {"min": 1}, "min_accelerator_memory_gib": True}},
        ),
    ],
)
def test_booleans_strings_and_vanishing_fractions_are_not_numbers(
    field: str, body: dict[str, Any]
) -> None:
    """gpus {min: true} was placed as 1 GPU, "10" read as 10, memory 0.5 became 0 MiB and
    '99:99:99' was 4 days: each is a slip, refused naming the field."""
    from pydantic import ValidationError

    from fedhpc.ops.tasks import SubmitTaskRequest

    with pytest.raises(ValidationError) as caught:
        SubmitTaskRequest.model_validate({"command": ["true"], **body})
    fields = {".".join(str(p) for p in e["loc"]) for e in caught.value.errors()}
    assert field in fields, fields


def test_whole_numbers_and_clock_times_still_read() -> None:
    from fedhpc.ops.tasks import SubmitTaskRequest

    req = SubmitTaskRequest.model_validate(
        {
            "command": ["true"],
            "envelope": {
                "gpus": {"min": 1, "max": 4},
                "memory": {"min": 1.5, "max": "64G"},
                "wall_time": {"min": "01:30:00", "max": "2-23:59:59"},
            },
            "task_budget": 10,
        }
    )
    env = req.envelope
    assert (env.gpus.min, env.gpus.max, env.memory.min, env.memory.max) == (1, 4, 2, 65536)
    assert (env.wall_time.min, env.wall_time.max) == (5400, 259199)
    assert req.task_budget == 10.0
