"""A slow or dead site costs only itself: no submission and no observation runs under the
orchestrator's lock. A submission that hangs at one site holds up neither the lock nor another
site's job, a control cycle never takes it for an intent a crash lost, and what it answers is
merged into the attempt as stored then (a cancel meanwhile stays a cancel). Likewise a squeue
that hangs: the other sites are observed at the same time and merged at once, placement goes
on, and what it answers late never undoes a cancel. Every scheduler command carries the
adapter's deadline (FEDHPC_COMMAND_TIMEOUT_S). A real store and real placement; each site's
adapter is a fake whose calls can be held until the test lets them go."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from typing import Any, cast
from unittest import mock

import anyio
import pytest

from fedhpc.adapters.arrays import ArrayJob
from fedhpc.adapters.command import Command, CommandResult
from fedhpc.adapters.dialects.base import SchedulerRejected
from fedhpc.adapters.site import SiteAdapter, SubmittedJob
from fedhpc.adapters.transports.base import TransportError
from fedhpc.collector import Collector
from fedhpc.domain.config import Site
from fedhpc.domain.envelope import ResourceEnvelope
from fedhpc.domain.job import AccountingRecord, JobObservation, JobSpec, JobState, Shape
from fedhpc.domain.site import Health, SiteState
from fedhpc.ops.tasks import CancelRequest, GroupChild, SubmitGroupRequest
from fedhpc.orchestrator.records import AttemptRecord
from fedhpc.orchestrator.service import Orchestrator
from fedhpc.placement import PolicyKind
from fedhpc.store import Store
from tests.unit.fake_submit import SubmitsOneByOne
from tests.unit.test_placement_world import cpu_partition, profile, site, state
from tests.unit.test_submit_accept import Clock, _req

SLOW = site(profile("slow", cpu_partition("p"), min_refresh_s=1))  # refreshed every 60 s
FAST = site(profile("fast", cpu_partition("p"), min_refresh_s=1))
LIMIT_S = 10  # every wait of these tests; none is a timing assertion


class _Gate:
    """A call held until the test opens it: `entered` is set when one arrives."""

    def __init__(self) -> None:
        self.entered = anyio.Event()
        self.open = anyio.Event()

    async def __call__(self) -> None:
        self.entered.set()
        await self.open.wait()


class _Site(SubmitsOneByOne):
    """The adapter surface dispatch and observation use. Submissions get the next job id;
    squeue says each job runs; `gates` holds a kind of call (submit, status) until opened."""

    login = "alice"
    roots: dict[str, str] = {}  # noqa: RUF012  (its profile names no $NAME root)
    dialect = None  # no start estimates, no user accounting

    def observe_due(self) -> bool:
        return True  # no status floor: every control cycle observes

    def observe_answered(self) -> None:
        return None

    def observe_refused(self) -> float:
        return 0.0

    def parent_id(self, job_id: str) -> str:
        return job_id  # no job arrays here

    def __init__(self, s: Site) -> None:
        self.site = s
        self.name = s.name
        self.calls: Counter[str] = Counter()
        self.gates: dict[str, _Gate] = {}
        self.failing: set[str] = set()  # kinds of call that raise a transport error
        self.submitted: list[str] = []  # job names, in the order sent
        self.cancelled: list[str] = []

    def root_path(self, path: str) -> str:
        return path

    async def _call(self, kind: str) -> None:
        self.calls[kind] += 1
        if (gate := self.gates.get(kind)) is not None:
            await gate()
        if kind in self.failing:
            raise TransportError(f"{self.name} does not answer")

    async def probe(self, *, timeout_s: float) -> SiteState:
        self.calls["probe"] += 1
        return state(self.site.profile)

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


def _world(
    store: Store, *, intent_grace_s: float = 45.0, slow_site: type[_Site] | None = None
) -> tuple[Orchestrator, _Site, _Site]:
    slow, fast = (slow_site or _Site)(SLOW), _Site(FAST)
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
    """A new task for `where` (its own command: never taken for a retry of another)."""
    n = await o.book.store.count("tasks")
    req = _req(command=("echo", str(n)), policy=PolicyKind.FIXED_SITE, fixed_site=where)
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


async def _sweep(o: Orchestrator, n: int) -> str:
    """A group of `n` alike one-CPU children (`echo 0` .. `echo n-1`), submitted: its id."""
    children = tuple(GroupChild(command=("echo", str(i))) for i in range(n))
    envelope = ResourceEnvelope.model_validate({"cpus": {"min": 1, "max": 1}})
    req = SubmitGroupRequest(objective="sweep", children=children, envelope=envelope)
    return (await o.groups.submit(req, wait_s=0)).group_id


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
            await o.tick()  # the scheduler could not know the job yet
            assert slow.calls["find"] == 0  # this process's own intent: not even looked up
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


async def _running_at_both(o: Orchestrator) -> tuple[str, str]:
    """A task with a job at slow and one at fast (bound, not yet observed)."""
    at_slow, at_fast = await _submit(o, "slow"), await _submit(o, "fast")
    await o.place_queued()
    return at_slow, at_fast


async def test_a_hanging_squeue_holds_no_lock_and_no_other_sites_observation_or_placement(
    store: Store, held: _Gate
) -> None:
    o, slow, fast = _world(store)
    at_slow, at_fast = await _running_at_both(o)
    slow.gates["status"] = held
    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(o.tick)
            await held.entered.wait()  # the cycle asks slow's squeue, which does not answer
            async with o.lock:  # free for anyone else meanwhile
                pass
            while (await _attempt(o, at_fast)).state is not JobState.RUNNING:
                await anyio.sleep(0.01)  # fast's answer merged while slow's is awaited
            late = await _submit(o, "fast")
            await o.place_queued()  # placement is not held up either
            assert (await _bound(o, late)).site == "fast"
            assert (await _attempt(o, at_slow)).state is JobState.SUBMITTED
            held.open.set()
    assert (await _attempt(o, at_slow)).state is JobState.RUNNING
    assert len(fast.submitted) == 2


async def test_every_site_is_asked_at_the_same_time(store: Store) -> None:
    o, slow, fast = _world(store)
    await _running_at_both(o)
    slow.gates["status"], fast.gates["status"] = _Gate(), _Gate()
    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(o.tick)
            await slow.gates["status"].entered.wait()  # asked one after the other, the second
            await fast.gates["status"].entered.wait()  # would wait for the first to answer
            slow.gates["status"].open.set()
            fast.gates["status"].open.set()


async def test_a_squeue_answer_that_arrives_after_a_cancel_leaves_the_task_cancelled(
    store: Store, held: _Gate
) -> None:
    o, slow, _ = _world(store)
    at_slow, _ = await _running_at_both(o)
    slow.gates["status"] = held
    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(o.tick)
            await held.entered.wait()  # squeue is asked while the job is still queued...
            await o.tools.cancel(CancelRequest(task_id=at_slow))  # ...and cancelled meanwhile
            held.open.set()  # squeue answers "running": older than the cancel
    att = await _attempt(o, at_slow)
    assert att.superseded and slow.cancelled == [att.job_id]
    assert (await o.book.load_task(at_slow)).state is JobState.CANCELLED
    # The cancel's own event (it wakes nobody), and nothing from the late answer.
    assert [e.kind for e in await store.events_after(0, limit=10)] == ["task.cancelled"]


async def test_a_hanging_scancel_holds_no_lock_and_the_cancel_is_owed_until_it_answers(
    store: Store, held: _Gate
) -> None:
    """A cancel's scheduler call (slow, rate-limited, hung) is sent after the lock: another
    session's submission is placed and bound meanwhile, and the task is cancelled in the
    store before scancel answers. A scancel that fails is owed, and sent again next cycle."""
    o, slow, _ = _world(store)
    at_slow, _ = await _running_at_both(o)
    slow.gates["cancel"] = held
    answers = []

    async def cancel() -> None:
        answers.append(await o.tools.cancel(CancelRequest(task_id=at_slow)))

    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(cancel)
            await held.entered.wait()  # scancel is running at slow
            async with o.lock:  # free for anyone else meanwhile
                pass
            assert (await o.book.load_task(at_slow)).state is JobState.CANCELLED
            other = await _submit(o, "fast")  # another session's work goes on
            await o.place_queued()
            assert (await _bound(o, other)).site == "fast"
            slow.failing.add("cancel")  # and this scancel fails when it answers
            held.open.set()
    owed = await _attempt(o, at_slow)
    assert owed.superseded and owed.cancel_pending
    # The answer never says the job stopped when no scheduler took its cancel.
    (answer,) = answers
    assert f"no scheduler has confirmed the cancel of job {owed.job_id} at slow" in str(
        answer.decision
    )
    assert "stopped" not in answer.next and "when those answer" in answer.next
    del slow.gates["cancel"]
    slow.failing.clear()
    await o.tick()  # the cycle sends what is owed
    assert slow.cancelled == [owed.job_id]
    assert not (await _attempt(o, at_slow)).cancel_pending
    await o.tick()
    assert slow.calls["cancel"] == 2  # once refused, once taken: never again


async def test_a_cancel_owed_to_an_offline_site_is_sent_when_it_answers_again(
    store: Store,
) -> None:
    """Cancelled while its site is offline: nothing is sent then, nor by the cycles while it
    stays offline; the first cycle after it answers again sends the scancel."""
    o, slow, _ = _world(store)
    at_slow, _ = await _running_at_both(o)
    up = o.collector.latest["slow"]
    down = SiteState(site="slow", health=Health.OFFLINE, collected_at=up.collected_at)
    o.collector.latest["slow"] = down
    await o.tools.cancel(CancelRequest(task_id=at_slow))
    await o.tick()
    await o.tick()
    assert slow.calls["cancel"] == 0 and (await _attempt(o, at_slow)).cancel_pending
    o.collector.latest["slow"] = up
    await o.tick()
    assert slow.cancelled == [(await _attempt(o, at_slow)).job_id]
    assert not (await _attempt(o, at_slow)).cancel_pending


async def test_two_cancels_and_a_cycle_at_once_send_one_scancel(store: Store, held: _Gate) -> None:
    """Two sessions cancel the same task while a control cycle runs: the job is cancelled
    once; the second cancel is told nothing was left to cancel."""
    o, slow, _ = _world(store)
    at_slow, _ = await _running_at_both(o)
    slow.gates["cancel"] = held
    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(o.tools.cancel, CancelRequest(task_id=at_slow))
            await held.entered.wait()  # the first cancel's scancel is out
            again = await o.tools.cancel(CancelRequest(task_id=at_slow))
            await o.tick()  # the cycle's sweep skips the cancel being sent
            held.open.set()
    assert again.state is JobState.CANCELLED and "already" in again.next.lower()
    assert slow.calls["cancel"] == 1
    assert not (await _attempt(o, at_slow)).cancel_pending


async def test_a_group_cancel_holds_no_lock_while_its_sites_cancel(
    store: Store, held: _Gate
) -> None:
    o, slow, fast = _world(store)
    req = SubmitGroupRequest(
        objective="o",
        children=tuple(GroupChild(command=("echo", str(i))) for i in range(4)),
        envelope=ResourceEnvelope(cpus={"min": 1}, wall_time={"min": "1m"}),
        spread=True,
    )
    group = await o.groups.submit(req, wait_s=0)
    await o.place_queued()
    slow.gates["cancel"], fast.gates["cancel"] = held, _Gate()
    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(o.tools.cancel, CancelRequest(task_id=group.group_id))
            await held.entered.wait()
            await fast.gates["cancel"].entered.wait()  # both sites asked at the same time
            async with o.lock:
                pass
            held.open.set()
            fast.gates["cancel"].open.set()
    assert len(slow.cancelled) + len(fast.cancelled) == 4
    assert {(await o.book.load_task(c.task_id)).state for c in group.children} == {
        JobState.CANCELLED
    }


class _Recording:
    """A transport that answers every command at once (sbatch with a job id) and keeps it."""

    name = "recording"

    def __init__(self) -> None:
        self.commands: list[Command] = []

    async def run(self, command: Command) -> CommandResult:
        self.commands.append(command)
        return CommandResult(0, "42\n" if "sbatch" in " ".join(command.argv) else "", "")

    async def aclose(self) -> None:
        return None


async def test_every_scheduler_command_carries_the_sites_deadline() -> None:
    transport = _Recording()
    adapter = SiteAdapter(SLOW, cast(Any, transport), command_timeout_s=7.0)
    spec = JobSpec(name="fedhpc-t-1", command=("true",), partition="p", shape=Shape(cpus=1))
    await adapter.submit_many([(spec, ["/x"])])  # recorded only: nothing runs, no answer
    await adapter.status(["1"])
    await adapter.accounting(["1"])
    await adapter.find(["fedhpc-t-1"])
    await adapter.cancel(["1"])
    assert [c.timeout_s for c in transport.commands] == [7.0] * 5


async def test_a_site_whose_squeue_fails_is_probed_again_as_soon_as_its_profile_allows(
    store: Store,
) -> None:
    o, slow, fast = _world(store)
    o.collector.adapters = {"slow": cast(Any, slow), "fast": cast(Any, fast)}
    await _running_at_both(o)
    await o.collector.refresh(force=True)  # next due in a refresh interval (60 s)
    slow.failing.add("status")  # its controller died since
    await o.tick()
    assert fast.calls["status"] == 1  # observed all the same
    later = time.monotonic() + SLOW.profile.min_refresh_s + 0.5  # the profile's floor only
    with mock.patch("fedhpc.collector.service.time.monotonic", return_value=later):
        await o.collector.refresh()
    assert (slow.calls["probe"], fast.calls["probe"]) == (2, 1)


class _Arrays:
    """A dialect that runs job arrays (all `array_dialect` asks for); never rendered here."""

    def render_array(self, *args: Any, **kwargs: Any) -> str:
        raise AssertionError("no array is formed in this test")

    def element_id(self, job_id: str, index: int) -> str:
        return f"{job_id}_{index}"

    def parent_id(self, job_id: str) -> str:
        return job_id.split("_", maxsplit=1)[0]


async def test_an_array_that_cannot_be_formed_sends_its_members_alone(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Forming a job array reads and writes the store under the lock; when that raises (an
    unreadable row, a store that went away) the members go one job each and the placer, which
    every session's work shares, goes on."""
    o, slow, _ = _world(store)
    monkeypatch.setattr(slow, "dialect", _Arrays(), raising=False)

    async def broken(intents: Any) -> Any:
        raise RuntimeError("the store went away")

    monkeypatch.setattr(o.dispatcher, "join_array", broken)
    children = tuple(GroupChild(command=("echo", str(i))) for i in range(3))
    req = SubmitGroupRequest(
        objective="sweep",
        children=children,
        envelope=ResourceEnvelope.model_validate(
            {"cpus": {"min": 1, "max": 1}, "sites_include": ["slow"]}
        ),
    )
    gid = (await o.groups.submit(req, wait_s=0)).group_id
    with anyio.fail_after(LIMIT_S):
        await o.place_queued()
        while len(slow.submitted) < 3:
            await anyio.sleep(0.01)
    view = await o.groups.view(gid, limit=10)
    for child in view.children:
        att = await _bound(o, child.task_id)
        assert att.site == "slow" and att.array_name is None
    after = await _submit(o, "fast")  # the placer still places
    with anyio.fail_after(LIMIT_S):
        await o.place_queued()
    assert (await _bound(o, after)).site == "fast"


class _RefusesArrays(_Site):
    """A site whose scheduler refuses any job array (too big a script, MaxArraySize) but
    takes each job alone; its answer for an array is the refusal, once per member."""

    async def submit_many(self, jobs: Sequence[Any]) -> list[Any]:
        out: list[Any] = []
        for job in jobs:
            if isinstance(job, ArrayJob):
                self.calls["array"] += 1
                refused = SchedulerRejected("sbatch: error: Batch job submission failed")
                out += [refused] * len(job.members)
            else:
                out += await super().submit_many([job])
        return out


async def test_a_refused_array_sends_each_member_alone_to_the_same_site(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The array's refusal is not each member's: they run at the site they were placed on,
    one job each, and the site is not recorded as refusing them."""
    o, slow, _ = _world(store, slow_site=_RefusesArrays)
    monkeypatch.setattr(slow, "dialect", _Arrays(), raising=False)
    o.collector.latest["fast"] = state(FAST.profile, health=Health.OFFLINE)  # slow or nothing
    gid = await _sweep(o, 3)
    with anyio.fail_after(LIMIT_S):
        await o.place_queued()
        while len(slow.submitted) < 3:
            await anyio.sleep(0.01)
    assert slow.calls["array"] == 1
    for child in (await o.groups.view(gid, limit=10)).children:
        with anyio.fail_after(LIMIT_S):
            while (atts := await o.book.load_attempts(child.task_id))[-1].job_id is None:
                await anyio.sleep(0.01)
        first, alone = atts
        assert first.array_name is not None and first.state is JobState.FAILED
        assert alone.site == "slow" and alone.array_name is None
        assert "slow" not in (await o.book.load_task(child.task_id)).refused_sites


class _MaxArraySize(_Site):
    """A scheduler with MaxArraySize 3: a bigger array is refused (once per member), a
    smaller one takes one id for all its elements."""

    async def submit_many(self, jobs: Sequence[Any]) -> list[Any]:
        out: list[Any] = []
        for job in jobs:
            if not isinstance(job, ArrayJob):
                out += await super().submit_many([job])
                continue
            self.calls[f"array{len(job.members)}"] += 1
            if len(job.members) > 3:
                refused = SchedulerRejected("sbatch: error: Invalid job array specification")
                out += [refused] * len(job.members)
                continue
            self.submitted.append(job.name)
            parent = str(len(self.submitted))
            out += [SubmittedJob(self.name, f"{parent}_{i}", "") for i in range(len(job.members))]
        return out


def _max_array_world(store: Store, monkeypatch: pytest.MonkeyPatch) -> tuple[Orchestrator, _Site]:
    """The world with `slow` a MaxArraySize-3 scheduler that runs arrays and `fast` offline:
    every child goes to `slow`."""
    o, slow, _ = _world(store, slow_site=_MaxArraySize)
    monkeypatch.setattr(slow, "dialect", _Arrays(), raising=False)
    monkeypatch.setattr(slow, "element_id", lambda job, i: f"{job}_{i}", raising=False)
    o.collector.latest["fast"] = state(FAST.profile, health=Health.OFFLINE)  # slow or nothing
    return o, slow


async def test_a_refused_array_is_halved_until_the_scheduler_takes_it(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An array too big for the site (MaxArraySize) goes again as arrays half its size, not
    as one job per member; the site's later arrays start at that size."""
    o, slow = _max_array_world(store, monkeypatch)
    gid = await _sweep(o, 8)
    with anyio.fail_after(LIMIT_S):
        await o.place_queued()
        while len(slow.submitted) < 4:
            await anyio.sleep(0.01)
    assert (slow.calls["array8"], slow.calls["array4"], slow.calls["array2"]) == (1, 2, 4)
    assert o.placer.submitter.array_caps.caps == {"slow": 2}
    for child in (await o.groups.view(gid, limit=10)).children:
        with anyio.fail_after(LIMIT_S):
            while (atts := await o.book.load_attempts(child.task_id))[-1].job_id is None:
                await anyio.sleep(0.01)
        assert [a.state for a in atts[:-1]] == [JobState.FAILED, JobState.FAILED]
        last = atts[-1]
        assert last.site == "slow" and last.array_name is not None  # in an array, not alone


async def test_a_member_that_cannot_be_formed_again_fails_alone_never_lost(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Re-forming a refused array: a member whose new attempt cannot be written ends failed
    with the reason (it was left with a failed attempt and nothing live: never seen again)."""
    o, _ = _max_array_world(store, monkeypatch)
    dispatcher = o.placer.submitter.dispatcher
    real = dispatcher.prepare
    seen: Counter[str] = Counter()
    victim: list[str] = []

    async def prepare(task: Any, p: Any, **kw: Any) -> Any:
        seen[task.id] += 1
        victim[:] = victim or [task.id]
        if task.id == victim[0] and seen[task.id] == 2:
            raise RuntimeError("the store went away for a moment")
        return await real(task, p, **kw)

    monkeypatch.setattr(dispatcher, "prepare", prepare)
    gid = await _sweep(o, 8)
    with anyio.fail_after(LIMIT_S):
        await o.place_queued()
        while not (task := await o.book.load_task(victim[0])).state.terminal:
            await anyio.sleep(0.01)
    assert task.state is JobState.FAILED and "could not submit to slow" in task.reasons[0]
    for child in (await o.groups.view(gid, limit=10)).children:  # the others all run
        if child.task_id != victim[0]:
            with anyio.fail_after(LIMIT_S):
                while (await o.book.load_attempts(child.task_id))[-1].job_id is None:
                    await anyio.sleep(0.01)
