"""The daemon's wait estimates at the I/O edge (`WaitInputs`): the schedulers' own start
estimates for a decision's top candidates (`ask`), each estimator's recent error (`errors`), the
learned estimator's index of observed waits (`history`), and the user's jobs in every partition
from the schedulers' accounting (`learn_from_accounting`), which the learned estimator learns
from next to fedhpc's own attempts. Placement stays pure: all of this reaches `place()` as
arguments."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable

import anyio
import structlog

from fedhpc.adapters.command import Command
from fedhpc.adapters.site import SiteAdapter
from fedhpc.collector import Collector
from fedhpc.domain.job import AccountingRecord, Shape
from fedhpc.errors import FedError
from fedhpc.orchestrator.liveness import offline, online
from fedhpc.orchestrator.records import is_own_job
from fedhpc.orchestrator.start_estimates import (
    EstimateCache,
    SchedulerAnswer,
    ask_scheduler,
    requests_from_trace,
    still_holds,
)
from fedhpc.placement import Placement, Policy, SchedulerKey, Unschedulable, WaitObservation
from fedhpc.placement.errors import ErrorObservation, EstimatorErrors
from fedhpc.placement.estimators import WaitHistory, size_bucket
from fedhpc.placement.policy import PolicyKind, WaitMethod
from fedhpc.store import Store, WaitSample

__all__ = ["ACCOUNTING_EVERY_S", "Newest", "WaitInputs", "asks_scheduler", "usable"]

log = structlog.get_logger(__name__)

ACCOUNTING_EVERY_S = 300.0  # the user's jobs are read from each site's accounting this often
# After a site's first read, each read asks only for jobs active since the last one, less this
# (a job that started while the last read ran is in both: observations are kept once).
ACCOUNTING_OVERLAP_S = 120


def asks_scheduler(policy: Policy) -> bool:
    """Whether a decision under `policy` uses the schedulers' estimates (auto, scheduler)."""
    return policy.kind is not PolicyKind.SHORTEST_QUEUE and policy.wait in (
        WaitMethod.AUTO,
        WaitMethod.SCHEDULER,
    )


@runtime_checkable
class _UserJobs(Protocol):
    def user_jobs_command(self, user: str, since_s: int) -> Command: ...

    def iter_user_jobs(
        self, lines: Iterable[str], skip_name: Callable[[str], bool] | None = None
    ) -> Iterator[AccountingRecord]: ...


def _observation(site: str, r: AccountingRecord) -> WaitObservation | None:
    """A started job's wait (start - eligible, else - submit) at its size, or None. fedhpc's
    own jobs (single tasks and group children) are left out: their attempts count already."""
    base = r.eligible or r.submit
    if r.start is None or base is None or not r.partition or r.array_index is not None:
        return None
    if is_own_job(r.name):
        return None
    tres = r.alloc_tres
    nodes = max(int(tres.get("node", "1") or 1), 1)
    gpus = int(tres.get("gres/gpu", "0") or 0)
    cpus = max(int(tres.get("cpu", "1") or 1), 1)
    wait = max(0.0, (r.start - base).total_seconds())
    return WaitObservation(
        site=site,
        partition=r.partition,
        gpus=gpus // nodes,
        cpus=max(cpus // nodes, 1),
        nodes=nodes,
        wait_s=min(wait, 1e8),
        observed_at=r.start,
        job=r.job_id,
    )


def _observed(samples: Iterable[WaitSample], users: list[WaitObservation]) -> list[WaitObservation]:
    """fedhpc's own finished attempts' waits, then the user's other jobs' (every partition)."""
    out = [
        WaitObservation(
            site=a.site,
            partition=a.partition,
            gpus=a.gpus,
            cpus=a.cpus,
            nodes=a.nodes,
            wait_s=a.wait_s,
            observed_at=a.ended_at,
        )
        for a in samples
        if a.wait_s is not None and a.ended_at is not None
    ]
    out.extend(users)
    return out


_Entry = tuple[tuple[datetime, float], int, WaitObservation]  # (newness, arrival, observation)


class Newest:
    """The observations a `WaitHistory` can ever read, gathered one at a time: the newest `cap`
    of each (site, partition, size bucket) and of each (site, partition), its two samples (an
    older one always loses to these, whatever else joins them). Holds at most that many at
    once, and one already held is not held twice (a job in two accounting reads)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._heaps: dict[tuple[str, ...], list[_Entry]] = {}
        self._held: dict[WaitObservation, int] = {}  # each held observation: in how many heaps
        self._arrived = 0

    def add(self, o: WaitObservation) -> None:
        if o in self._held:
            return
        b = (o.site, o.partition, size_bucket(o.gpus, o.cpus, o.nodes))
        entry: _Entry = ((o.observed_at, o.wait_s), self._arrived, o)
        self._arrived += 1
        for key in (b, b[:2]):
            heap = self._heaps.setdefault(key, [])
            if len(heap) < self.cap:
                heapq.heappush(heap, entry)
            elif (gone := heapq.heappushpop(heap, entry)[2]) is o:  # the oldest of cap + 1 goes
                continue
            elif self._held[gone] == 1:
                del self._held[gone]
            else:
                self._held[gone] -= 1
            self._held[o] = self._held.get(o, 0) + 1

    def __len__(self) -> int:
        return len(self._held)

    def kept(self) -> list[WaitObservation]:
        """What is held, newest first."""
        return sorted(self._held, key=lambda o: (o.observed_at, o.wait_s), reverse=True)


def usable(observations: Iterable[WaitObservation], cap: int) -> list[WaitObservation]:
    """`Newest` over `observations`, newest first."""
    newest = Newest(cap)
    for o in observations:
        newest.add(o)
    return newest.kept()


class WaitInputs:
    """What the wait estimators get beyond the snapshot, kept between decisions: the
    schedulers' answers (one control cycle), the learned index and the estimators' errors
    (rebuilt once per control cycle, `new_cycle`), and the user's jobs from accounting."""

    def __init__(
        self,
        store: Store,
        collector: Collector,
        adapters: Mapping[str, SiteAdapter],
        *,
        clock: Callable[[], datetime],
        cycle_s: float,
        timeout_s: float,
    ) -> None:
        self.store = store
        self.collector = collector
        self.adapters = adapters
        self.clock = clock
        # The schedulers' start estimates (sbatch --test-only): kept for one control cycle, a
        # site asked for at most `timeout_s` per decision (then learned, then paper).
        self.cache = EstimateCache(ttl_s=cycle_s)
        self.timeout_s = timeout_s
        # (site, partition) -> task -> (monotonic time, shape) placed there lately: an answer
        # asked before holds while the room it was told about remains (`holds`).
        self.placed: dict[tuple[str, str], dict[str, tuple[float, Shape]]] = {}
        # The user's other jobs' waits per site, from the schedulers' accounting, and when each
        # site's accounting was last read (monotonic): `learn_from_accounting`.
        self.user_waits: dict[str, list[WaitObservation]] = {}
        self.accounting_read: dict[str, float] = {}
        self.accounting_through: dict[str, datetime] = {}  # wall time of the last read that held
        # The learned wait estimator's index: built at most once per control cycle (the cycle
        # is what records finished attempts), shared by every decision until the next one.
        self._index: tuple[WaitHistory | None] | None = None
        self._index_lock = anyio.Lock()
        self._cycle = 0  # control cycles ended (`new_cycle`)
        self.index_builds = 0  # wait-history indexes built so far (tests and benchmarks read it)
        self._errors: EstimatorErrors | None = None  # per cycle too
        self._wait_samples: list[WaitSample] | None = None  # what both are built from

    def new_cycle(self) -> None:
        """A control cycle recorded what it observed: the next decision rebuilds the index."""
        self._cycle += 1
        self._index = None
        self._errors = None
        self._wait_samples = None

    def mark_placed(self, site: str, partition: str, shape: Shape, task: str) -> None:
        """`task` goes to (site, partition) with `shape` (marked at its decision and again at
        its dispatch: counted once): earlier scheduler answers there hold only while there is
        room for it too. Marks older than any answer kept are forgotten."""
        now = self.cache.clock()
        here = self.placed.setdefault((site, partition), {})
        here[task] = (now, shape)
        for name in [k for k, (t, _) in here.items() if now - t > self.cache.ttl_s]:
            del here[name]

    async def _samples(self) -> list[WaitSample]:
        """The newest finished attempts' waits, read once per control cycle for the index and
        the estimators' errors alike (a few fields each, never the bodies)."""
        if self._wait_samples is None:
            cycle = self._cycle
            samples = await self.store.wait_samples()
            if cycle != self._cycle:  # a cycle ended during the read: not kept for the next
                return samples
            self._wait_samples = samples
        return self._wait_samples

    async def history(self) -> WaitHistory | None:
        """The learned estimator's index, built once per control cycle (on first use after
        `new_cycle`) and shared by every decision of that cycle. Built off the event loop
        (thousands of observations: tens of ms on a busy machine, which a REST request would
        otherwise wait out), one build at a time."""
        async with self._index_lock:
            if self._index is None:
                cycle = self._cycle  # before the read: the samples must be this cycle's
                samples, users, now = await self._samples(), self.user_observations(), self.clock()
                settings = Policy().settings

                def build() -> WaitHistory | None:
                    history = _observed(samples, users)
                    return WaitHistory(history, now=now, settings=settings) if history else None

                index = await anyio.to_thread.run_sync(build)
                self.index_builds += 1
                if cycle != self._cycle:  # a cycle ended meanwhile: this one is already old
                    return index
                self._index = (index,)
        return self._index[0]

    def holds(self, key: SchedulerKey, start: datetime, asked: float, shape: Shape | None) -> bool:
        """Whether a start asked at `asked` (monotonic) still holds: no job fedhpc placed on
        its partition since, or room left for those jobs and this one (`still_holds`)."""
        since = [s for t, s in self.placed.get(key[:2], {}).values() if t >= asked]
        if not since:
            return True
        state = self.collector.latest.get(key[0])
        partition = state.partition(key[1]) if state is not None else None
        asked_wall = self.clock() - timedelta(seconds=self.cache.clock() - asked)
        return still_holds(start, asked_wall, shape, partition, since)

    def fresh(self, answer: SchedulerAnswer) -> tuple[dict[SchedulerKey, datetime], dict[str, str]]:
        """The answers that still hold (`holds`), and the notes (per site: why some
        candidates have none)."""
        starts = {}
        notes = dict(answer.notes)
        for key, start in answer.starts.items():
            if not self.holds(key, start, answer.asked_at.get(key, 0.0), answer.shapes.get(key)):
                notes.setdefault(key[0], "asked before fedhpc placed a job on that partition")
                self.cache.drop(key)  # the next decision asks again
                continue
            starts[key] = start
        return starts, notes

    async def ask(self, firsts: list[Placement | Unschedulable]) -> SchedulerAnswer:
        """The schedulers' start estimates for the top candidates of first (pure) passes: one
        batched remote call per site, all sites at once, answers reused within the cycle.
        Sites known to be offline are not asked."""
        reqs = [r for f in firsts if isinstance(f, Placement) for r in requests_from_trace(f.trace)]
        for req in reqs:  # a kept answer that no longer holds is asked again now
            hit = self.cache.get(req)
            if hit and hit[0] and not self.holds(req.key, hit[0], hit[1], req.shape):
                self.cache.drop(req.key)
        skip = {
            s: "offline (its last probe failed)"
            for s in self.collector.sites
            if offline(self.collector, s)
        }
        return await ask_scheduler(
            reqs, self.adapters, timeout_s=self.timeout_s, cache=self.cache, skip=skip
        )

    async def errors(self) -> EstimatorErrors:
        """Each estimator's recent error per site and partition: the waits predicted when jobs
        were placed against the waits accounting reported. Built once per control cycle, off
        the event loop as the learned index is."""
        async with self._index_lock:
            if self._errors is None:
                cycle = self._cycle  # before the read: the samples must be this cycle's
                samples, now, s = await self._samples(), self.clock(), Policy().settings

                def build() -> EstimatorErrors:
                    obs = [
                        ErrorObservation(
                            a.site,
                            a.partition,
                            method,
                            predicted,
                            a.wait_s,
                            datetime.fromisoformat(a.started_at),
                        )
                        for a in samples
                        if a.wait_s is not None and a.started_at is not None
                        for method, predicted in a.predicted_waits.items()
                    ]
                    return EstimatorErrors(
                        obs, now=now, window_s=s.learned_window_s, min_samples=s.learned_min_samples
                    )

                errors = await anyio.to_thread.run_sync(build)
                if cycle != self._cycle:  # a cycle ended meanwhile: this one is already old
                    return errors
                self._errors = errors
        return self._errors

    async def learn_from_accounting(self, *, force: bool = False) -> int:
        """Read the user's jobs that started in the learned window from each online site's
        accounting (one `sacct` per site, at most every ACCOUNTING_EVERY_S; sites in parallel,
        bounded in time): the whole window the first time, then only the jobs active since
        the last read that held (a sweep leaves tens of thousands in the window: re-reading
        them all every few minutes cost megabytes and a stalled loop). The answer is read as
        a stream and folded into what is kept a read's worth of lines at a time, so a read
        holds those lines and the kept observations, however long the user's history (over
        Globus Compute, which cannot stream, the whole answer once). fedhpc's own jobs are
        passed over unread (their attempts count already). A read that fails keeps nothing of
        what it had read: the site keeps the last good read's and asks again from it at the
        next read. Returns the observations kept."""
        settings = Policy().settings
        window, cap = int(settings.learned_window_s), settings.learned_max_samples
        now = anyio.current_time()
        due = [
            s
            for s, a in sorted(self.adapters.items())
            if isinstance(a.dialect, _UserJobs)
            and online(self.collector, s)
            and (force or now - self.accounting_read.get(s, -1e18) >= ACCOUNTING_EVERY_S)
        ]

        async def one(site: str) -> None:
            adapter = self.adapters[site]
            dialect = adapter.dialect
            assert isinstance(dialect, _UserJobs)
            self.accounting_read[site] = now
            started = self.clock()
            through = self.accounting_through.get(site)
            since = window
            if through is not None and site in self.user_waits:
                since = min(window, int((started - through).total_seconds()) + ACCOUNTING_OVERLAP_S)
            command = dialect.user_jobs_command(adapter.login, max(since, 1))
            oldest = started - timedelta(seconds=window)
            # Only what a WaitHistory can use is kept: the window holds every job of a sweep
            # (thousands), which no decision needs all of. A job in both reads is kept once.
            newest = Newest(cap)
            for o in self.user_waits.get(site, []) if since < window else []:
                if o.observed_at >= oldest:
                    newest.add(o)

            def fold(lines: list[str]) -> None:
                for r in dialect.iter_user_jobs(lines, is_own_job):
                    if (x := _observation(site, r)) is not None:
                        newest.add(x)

            async def on_lines(lines: list[str]) -> None:
                await anyio.to_thread.run_sync(fold, lines)  # parsed off the loop

            async def read() -> None:
                with anyio.fail_after(self.timeout_s * 5):
                    result = await adapter.read_lines(command, "user_jobs", on_lines)
                if not result.ok:  # its rows (if any) were folded: none of them is kept
                    why = result.stderr.strip().splitlines()[-1:] or [f"exit {result.returncode}"]
                    raise ValueError(f"{command.argv[0]} failed: {why[0]}")

            try:
                await read()
            except (FedError, TimeoutError, ValueError, ArithmeticError, OSError) as exc:
                # Any typed error is this site's alone (a login that needs a person, a refused
                # transport setting), and so is an answer no scheduler gives (garbage): raised
                # in the task group it would cancel every other site.
                log.info("user accounting unavailable", site=site, error=str(exc)[:200])
                return
            self.user_waits[site] = newest.kept()
            self.accounting_through[site] = started

        async with anyio.create_task_group() as tg:
            for site in due:
                tg.start_soon(one, site, name=f"user-accounting:{site}")
        if due:
            self.new_cycle()  # the learned index is rebuilt with them
        return sum(len(v) for v in self.user_waits.values())

    def user_observations(self) -> list[WaitObservation]:
        """The user's jobs' waits from accounting, every site."""
        return [w for site in sorted(self.user_waits) for w in self.user_waits[site]]
