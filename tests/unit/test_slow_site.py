"""A slow or dead site costs only itself: no scheduler call runs under the orchestrator's lock.
A submission that hangs at one site holds up neither the lock nor another site's job, a
control cycle never takes it for an intent a crash lost, and what it answers is merged into
the attempt as stored then (a cancel meanwhile stays a cancel). A real store and real
placement; each site's adapter is a fake whose calls can be held until the test lets them go."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, cast

import anyio
import pytest

from fedhpc.adapters.site import SubmittedJob
from fedhpc.collector import Collector
from fedhpc.domain.config import Site
from fedhpc.domain.job import AccountingRecord, JobObservation, JobSpec, JobState
from fedhpc.ops.tasks import CancelRequest
from fedhpc.orchestrator.records import AttemptRecord
from fedhpc.orchestrator.service import Orchestrator
from fedhpc.placement import PolicyKind
from fedhpc.store import Store
from tests.unit.test_placement_world import cpu_partition, profile, site, state
from tests.unit.test_submit_accept import Clock, _req

SLOW = site(profile("slow", cpu_partition("p")))
FAST = site(profile("fast", cpu_partition("p")))
LIMIT_S = 10  # every wait of these tests; none is a timing assertion


class _Gate:
    """A call held until the test opens it: `entered` is set when one arrives."""

    def __init__(self) -> None:
        self.entered = anyio.Event()
        self.open = anyio.Event()

    async def __call__(self) -> None:
        self.entered.set()
        await self.open.wait()


class _Site:
    """The adapter surface dispatch and observation use. Submissions get the next job id;
    squeue says each job runs; `gates` holds a kind of call (submit, status) until opened."""

    login = "alice"
    roots: dict[str, str] = {}  # noqa: RUF012  (its profile names no $NAME root)
    dialect = None  # no start estimates, no user accounting

    def __init__(self, s: Site) -> None:
        self.site = s
        self.name = s.name
        self.calls: Counter[str] = Counter()
        self.gates: dict[str, _Gate] = {}
        self.submitted: list[str] = []  # job names, in the order sent
        self.cancelled: list[str] = []

    def root_path(self, path: str) -> str:
        return path

    async def _call(self, kind: str) -> None:
        self.calls[kind] += 1
        if (gate := self.gates.get(kind)) is not None:
            await gate()

    async def submit(self, spec: JobSpec, *, ensure_dirs: Sequence[str] = ()) -> SubmittedJob:
        self.submitted.append(spec.name)
        await self._call("submit")
        return SubmittedJob(self.name, str(len(self.submitted)), "")

    async def find(self, names: Sequence[str]) -> dict[str, str]:
        await self._call("find")
        return {}

    async def status(self, job_ids: Sequence[str]) -> list[JobObservation]:
        await self._call("status")
        return [
            JobObservation(job_id=j, state=JobState.RUNNING, native_state="RUNNING")
            for j in job_ids
        ]

    async def accounting(self, job_ids: Sequence[str]) -> list[AccountingRecord]:
        await self._call("accounting")
        return []

    async def cancel(self, job_ids: Sequence[str]) -> None:
        await self._call("cancel")
        self.cancelled.extend(job_ids)


def _world(store: Store, *, intent_grace_s: float = 45.0) -> tuple[Orchestrator, _Site, _Site]:
    slow, fast = _Site(SLOW), _Site(FAST)
    clock = Clock()
    collector = Collector({"slow": SLOW, "fast": FAST}, {}, store, clock=clock)
    collector.latest = {"slow": state(SLOW.profile), "fast": state(FAST.profile)}
    collector.ready.set()
    adapters = {"slow": cast(Any, slow), "fast": cast(Any, fast)}
    o = Orchestrator(
        store, collector, adapters, clock=clock, retry_window_s=120, intent_grace_s=intent_grace_s
    )
    return o, slow, fast


async def _submit(o: Orchestrator, where: str) -> str:
    req = _req(policy=PolicyKind.FIXED_SITE, fixed_site=where)
    return (await o.intake.submit_task(req, wait_s=0)).task_id


async def _attempt(o: Orchestrator, task_id: str) -> AttemptRecord:
    (att,) = await o.book.load_attempts(task_id)
    return att


async def _bound(o: Orchestrator, task_id: str) -> AttemptRecord:
    """The task's attempt once its job id is recorded (polled: it is written on a thread)."""
    with anyio.fail_after(LIMIT_S):
        while (att := await _attempt(o, task_id)).job_id is None:
            await anyio.sleep(0.01)
    return att


@pytest.fixture
def held() -> _Gate:
    return _Gate()


async def test_a_hanging_submission_holds_no_lock_and_no_other_sites_job(
    store: Store, held: _Gate
) -> None:
    o, slow, fast = _world(store)
    slow.gates["submit"] = held
    stuck = await _submit(o, "slow")
    quick = await _submit(o, "fast")
    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(o.place_queued)
            await held.entered.wait()  # slow's sbatch is running
            async with o.lock:  # free for anyone else meanwhile (fail_after says if not)
                pass
            assert (await _bound(o, quick)).site == "fast"  # recorded while slow's still hangs
            intent = await _attempt(o, stuck)
            assert intent.job_id is None and intent.state is JobState.SUBMITTED
            held.open.set()
    assert (await _bound(o, stuck)).job_id == "1"
    assert slow.submitted == [intent.job_name]
    assert len(fast.submitted) == 1


async def test_a_control_cycle_never_takes_an_intent_being_submitted_for_a_lost_one(
    store: Store, held: _Gate
) -> None:
    o, slow, _ = _world(store, intent_grace_s=0)  # any unseen intent is "lost" at once
    slow.gates["submit"] = held
    stuck = await _submit(o, "slow")
    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(o.place_queued)
            await held.entered.wait()
            await o.tick()  # the scheduler does not know the job yet: find answers nothing
            assert slow.calls["find"] == 1
            held.open.set()
    assert len(slow.submitted) == 1  # never submitted twice
    assert (await _bound(o, stuck)).state is JobState.SUBMITTED


async def test_a_task_cancelled_while_its_submission_hangs_stays_cancelled_and_its_job_goes(
    store: Store, held: _Gate
) -> None:
    o, slow, _ = _world(store)
    slow.gates["submit"] = held
    stuck = await _submit(o, "slow")
    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(o.place_queued)
            await held.entered.wait()
            await o.tools.cancel(CancelRequest(task_id=stuck))  # no job id yet: cancel owed
            held.open.set()
    att = await _bound(o, stuck)
    assert att.superseded and att.cancel_pending  # the job it got is still to be cancelled
    assert (await o.book.load_task(stuck)).state is JobState.CANCELLED
    await o.tick()
    assert slow.cancelled == [att.job_id]
    assert (await o.book.load_task(stuck)).state is JobState.CANCELLED
