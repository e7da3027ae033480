"""The short settle loop (accounting asked again a few times, 0.2 s apart, for a job that left
the queue before its final row) is for single jobs: an array's elements wait for the next
cycle, since a sweep ends some every cycle and each read is of the whole array (issue 40:
most of the sacct calls of a 5,000-child sweep). Fake adapters, a real store and placement."""

from __future__ import annotations

from collections.abc import Sequence

import anyio

from fedhpc.adapters.site import SubmittedJob
from fedhpc.domain.job import JobObservation, JobSpec
from fedhpc.orchestrator.service import Orchestrator
from fedhpc.placement import PolicyKind
from fedhpc.store import Store
from tests.unit.test_slow_site import LIMIT_S, _Site, _world
from tests.unit.test_submit_accept import _req


class _Gone(_Site):
    """Every job has left the queue, none has its final accounting row yet; `element`: its
    jobs are array elements (`7_0`, `7_1`, ...)."""

    element = False

    def parent_id(self, job_id: str) -> str:
        return job_id.split("_", 1)[0]

    async def submit(self, spec: JobSpec, *, ensure_dirs: Sequence[str] = ()) -> SubmittedJob:
        self.submitted.append(spec.name)
        n = len(self.submitted)
        return SubmittedJob(self.name, f"7_{n}" if self.element else str(n), "")

    async def status(self, job_ids: Sequence[str]) -> list[JobObservation]:
        self.calls["status"] += 1
        return []


async def _accounting_calls_in_a_cycle(store: Store, *, element: bool) -> int:
    o, slow, _ = _world(store, slow_site=_Gone)
    assert isinstance(slow, _Gone)
    slow.element = element
    req = _req(command=("echo", "x"), policy=PolicyKind.FIXED_SITE, fixed_site="slow")
    task_id = (await o.intake.submit_task(req, wait_s=0)).task_id
    await o.place_queued()
    with anyio.fail_after(LIMIT_S):
        while (await o.book.load_attempts(task_id))[0].job_id is None:
            await anyio.sleep(0.01)
    await _tick(o)
    return slow.calls["accounting"]


async def _tick(o: Orchestrator) -> None:
    with anyio.fail_after(LIMIT_S):
        await o.tick()


async def test_a_single_job_just_gone_is_asked_again_within_the_cycle(store: Store) -> None:
    assert await _accounting_calls_in_a_cycle(store, element=False) == 5  # 1 + 4 retries


async def test_an_array_element_just_gone_waits_for_the_next_cycle(store: Store) -> None:
    assert await _accounting_calls_in_a_cycle(store, element=True) == 1
