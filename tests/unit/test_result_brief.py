"""get_result's brief form (what an agent reads after a resume): a task's only job, in the
task's state without a reason of its own, is flattened into the answer; a retried, hedged or
failed-with-a-reason task keeps its attempts; the full form never flattens. A real store and
orchestrator; the sites are never contacted (their outputs are unreadable: not probed)."""

from __future__ import annotations

from typing import Any

from fedhpc.adapters.site import SiteAdapter
from fedhpc.adapters.transports.local import LocalTransport
from fedhpc.collector import Collector
from fedhpc.domain.job import JobState
from fedhpc.domain.site import TransportSpec
from fedhpc.ops.tasks import ResultRequest, SubmitTaskRequest
from fedhpc.orchestrator.records import AttemptRecord, TaskRecord
from fedhpc.orchestrator.service import Orchestrator
from fedhpc.store import Store
from tests.unit.attempts import attempt
from tests.unit.test_placement_world import NOW, cpu_partition, env, profile, site


async def _task(
    store: Store, state: JobState, *atts: dict[str, Any], task_id: str = "t0000000b2c"
) -> tuple[Orchestrator, str]:
    sites = {"s": site(profile("s", cpu_partition("p")))}
    adapters = {"s": SiteAdapter(sites["s"], LocalTransport(TransportSpec(kind="local")))}
    o = Orchestrator(
        store, Collector(sites, {}, store, clock=lambda: NOW), adapters, clock=lambda: NOW
    )
    task = TaskRecord(
        id=task_id,
        request=SubmitTaskRequest(command=("true",), envelope=env(cpus=1), name="step1"),
        idempotency_key=task_id,
        state=state,
        created_at=NOW,
        attempts_made=len(atts),
    )
    rows: list[AttemptRecord] = [
        attempt(task.id, now=NOW, **{"n": i, "job_id": f"4{i}", **a}) for i, a in enumerate(atts, 1)
    ]
    async with store.transaction() as tx:
        for row in rows:
            await o.book.save(tx, task, row, at=NOW)
    return o, task.id


async def _brief(o: Orchestrator, task_id: str, brief: bool = True) -> dict[str, Any]:
    got = await o.tools.get_result(ResultRequest(task_id=task_id, brief=brief))
    return got.model_dump(exclude_defaults=True, mode="json")


async def test_a_task_whose_one_job_ended_as_it_did_reads_flat(store: Store) -> None:
    done = {"state": JobState.COMPLETED, "wait_s": 12.34, "runtime_s": 5.0, "exit_code": 0}
    o, task_id = await _task(store, JobState.COMPLETED, done)
    got = await _brief(o, task_id)
    assert "attempts" not in got, got
    assert (got["site"], got["partition"], got["job_id"]) == ("s", "p", "41")
    assert (got["wait_s"], got["runtime_s"], got["exit_code"]) == (12.3, 5.0, 0)
    assert got["name"] == "step1" and got["state"] == "completed"
    # The full form (the task resource, `fedhpc task`) keeps the attempt as it was.
    full = await _brief(o, task_id, brief=False)
    assert [a["n"] for a in full["attempts"]] == [1] and "job_id" not in full


async def test_a_running_task_on_its_first_job_reads_flat_too(store: Store) -> None:
    o, task_id = await _task(store, JobState.RUNNING, {"state": JobState.RUNNING})
    got = await _brief(o, task_id)
    assert "attempts" not in got and got["site"] == "s" and got["state"] == "running"


async def test_a_retried_a_hedged_or_a_reasoned_task_keeps_its_attempts(store: Store) -> None:
    failed = {"state": JobState.FAILED, "exit_code": 1, "reason": "NonZeroExitCode"}
    retried = await _task(store, JobState.COMPLETED, failed, {"state": JobState.COMPLETED})
    pending = {"state": JobState.PENDING}
    hedged = await _task(store, JobState.PENDING, pending, pending, task_id="t0000000c3d")
    reasoned = await _task(store, JobState.FAILED, failed, task_id="t0000000d4e")
    lost = {"state": JobState.FAILED, "exit_code": 1}
    waiting = await _task(store, JobState.QUEUED, lost, task_id="t0000000e5f")
    for (o, task_id), ns in ((retried, [1, 2]), (hedged, [1, 2]), (reasoned, [1]), (waiting, [1])):
        got = await _brief(o, task_id)
        assert [a["n"] for a in got["attempts"]] == ns, got
        assert "site" not in got and "job_id" not in got, got
