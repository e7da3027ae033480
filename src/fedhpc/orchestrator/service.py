"""The orchestrator: accept a submission durably (answered at once), place and dispatch it in
the daemon (`placer`), then own the remote lifecycle in control cycles (`control`). Placement
and observation share one lock; accepting a submission does not wait for it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import anyio
import structlog

from fedhpc.adapters.dialects.base import SchedulerRejected
from fedhpc.adapters.site import SiteAdapter, WorkdirFailed
from fedhpc.adapters.transports.base import TransportError
from fedhpc.collector import Collector
from fedhpc.domain.config import Site
from fedhpc.domain.envelope import DraftSource, ResourceEnvelope
from fedhpc.domain.job import JobSpec, JobState, Shape
from fedhpc.domain.site import Health, ResourceSnapshot
from fedhpc.errors import ErrorKind, UsageError
from fedhpc.globus_auth.errors import GlobusLoginRequired
from fedhpc.ops.continuations import ContinuationSpec
from fedhpc.ops.tasks import Provenance, SubmitTaskRequest, TaskHandle
from fedhpc.ops.workdir import resolve_workdir
from fedhpc.orchestrator import estimates, idem, staging, workdirs
from fedhpc.orchestrator.records import AttemptRecord, TaskRecord, job_name, new_id
from fedhpc.orchestrator.start_estimates import EstimateCache, SchedulerAnswer
from fedhpc.placement import (
    Ledger,
    Placement,
    Policy,
    Unschedulable,
    WaitObservation,
    place,
    place_group,
)
from fedhpc.placement.errors import EstimatorErrors
from fedhpc.placement.estimators import WaitHistory
from fedhpc.store import Store, Tx
from fedhpc.store.continuations import put_continuation

__all__ = ["Orchestrator", "TaskNotFound"]

log = structlog.get_logger(__name__)


def _utcnow() -> datetime:
    return datetime.now(UTC)


class TaskNotFound(UsageError):
    code = "not_found"
    kind = ErrorKind.NOT_FOUND
    default_hint = "List tasks with `fedhpc tasks` (or the list_events tool)."


# A submit answers once its task is durably queued; it waits this long at most for the first
# placement, so that a single task's answer usually names its site and job.
PLACE_WAIT_S = 2.0
WAITING_FOR_PROBES = "queued: waiting for the first probe of the sites (the daemon just started)"


@dataclass(slots=True)
class Claim:
    """A job dispatched that its site's last probe may not show: kept until a probe that
    started after the scheduler accepted it (`done`), so a job whose `sbatch` was still in
    flight while `squeue` ran is never left out of the user's job count."""

    at: datetime
    site: str
    partition: str
    account: str | None
    shape: Shape
    charge: float
    done: datetime | None = None  # when the submit call returned (None: still in flight)


@dataclass(frozen=True, slots=True)
class Ended:
    """A job of ours that ended (scheduler's end time) at a partition: while the site's last
    probe still counts it among the user's jobs, the ledger takes it off again, so work held
    by a per-user limit is released at the next control cycle, not the next probe."""

    site: str
    partition: str
    at: datetime


# Clock skew and the probe's own duration: a job that ended within this of the probe's start
# may already be missing from it, so it is not taken off (the next probe shows it).
ENDED_MARGIN_S = 5.0


def _pruned(p: Placement) -> str:
    n = p.trace.pruned_partitions()
    return f" ({n} partitions pruned by class, unscored)" if n else ""


class Orchestrator:
    """Tasks and attempts. `tick()` is one control cycle; `run()` repeats it."""

    # An intent (attempt written, job id unknown) younger than this may still be in sbatch:
    # only older intents that the scheduler does not know are submitted again.
    INTENT_GRACE_S = 45.0

    def __init__(
        self,
        store: Store,
        collector: Collector,
        adapters: Mapping[str, SiteAdapter],
        *,
        cycle_s: float = 10.0,
        intent_grace_s: float | None = None,
        site_lost_after_s: float = 300.0,
        retry_window_s: float = idem.RETRY_WINDOW_S,
        clock: Callable[[], datetime] = _utcnow,
        estimate_timeout_s: float = 2.0,
        submits_per_cycle: int = 100,
    ) -> None:
        self.store = store
        self.collector = collector
        self.adapters = dict(adapters)
        self.cycle_s = cycle_s
        if intent_grace_s is not None:
            self.INTENT_GRACE_S = intent_grace_s
        self.clock = clock
        # Work on an offline site that fedhpc cannot move wakes the agent after this long: a
        # probe that failed once is not yet a lost site.
        self.site_lost_after_s = site_lost_after_s
        self.retry_window_s = retry_window_s
        self.lock = anyio.Lock()  # placement, dispatch and observation: one at a time
        self.accepting = anyio.Lock()  # a retry's lookup and the insert it races with
        self.wake = anyio.Event()
        self.placer_wake = anyio.Event()  # queued work arrived
        self.progress = anyio.Event()  # set (and replaced) after each placement batch
        self.claims: list[Claim] = []
        self.ended: list[Ended] = []
        self.cycles = 0
        # Good citizenship: at most this many new jobs placed for one site per control cycle
        # (retries and re-placements of live work are not counted); the rest wait a cycle.
        self.submits_per_cycle = submits_per_cycle
        self.placed_this_cycle: Counter[str] = Counter()
        self._calls_seen: dict[str, int] = {}  # site -> remote calls counted at the last cycle
        self.calls_per_cycle_max: dict[str, int] = {}
        self.site_limits: dict[str, anyio.CapacityLimiter] = {}
        self.notify: Callable[[], None] = lambda: None  # told after events may have landed
        # Why the daemon cannot start a runtime's resumes now ("" = it can): set by the daemon
        # to its bridge's check, so that no answer says "end your turn" when nothing will wake.
        self.resume_blocker: Callable[[str], str] = lambda _runtime: ""
        # site -> job id -> (task id, attempt n, monotonic time): attempts that ended on a final
        # but not yet settled accounting row; their eligible time is filled in when it settles.
        self.unsettled: dict[str, dict[str, tuple[str, int, float]]] = {}
        # The learned wait estimator's index: built at most once per control cycle (the cycle
        # is what records finished attempts), shared by every decision until the next one.
        self._waits: tuple[WaitHistory | None] | None = None
        self.index_builds = 0  # wait-history indexes built so far (tests and benchmarks read it)
        self.estimator_errors: EstimatorErrors | None = None  # per cycle too (estimates.errors)
        # The user's other jobs' waits per site, from the schedulers' accounting, and when each
        # site's accounting was last read (monotonic): estimates.learn_from_accounting.
        self.user_waits: dict[str, list[WaitObservation]] = {}
        self.accounting_read: dict[str, float] = {}
        # The schedulers' start estimates (sbatch --test-only): kept for one control cycle, a
        # site asked for at most `estimate_timeout_s` per decision (then learned, then paper).
        self.estimates = EstimateCache(ttl_s=cycle_s)
        self.estimate_timeout_s = estimate_timeout_s
        # (site, partition) -> monotonic time fedhpc last placed a job there: an estimate asked
        # before it no longer holds (the job may take the slot it predicted).
        self.placed_at: dict[tuple[str, str], float] = {}

    @property
    def sites(self) -> dict[str, Site]:
        return self.collector.sites

    def count_cycle(self) -> None:
        """Start a control cycle: the remote calls each site took since the last one (probes,
        submissions, status, accounting, file reads) raise that site's per-cycle maximum."""
        self.cycles += 1
        self.placed_this_cycle.clear()
        for name, adapter in self.adapters.items():
            total = sum(adapter.calls.values())
            since = total - self._calls_seen.get(name, 0)
            self._calls_seen[name] = total
            self.calls_per_cycle_max[name] = max(self.calls_per_cycle_max.get(name, 0), since)

    def remote_calls(self) -> dict[str, dict[str, object]]:
        """Per site: remote calls by kind since the daemon started, and the most in a cycle."""
        return {
            name: {"total": dict(sorted(a.calls.items())),
                   "max_per_cycle": self.calls_per_cycle_max.get(name, 0)}
            for name, a in sorted(self.adapters.items())
        }  # fmt: skip

    # -- records ----------------------------------------------------------------------------
    async def load_task(self, task_id: str) -> TaskRecord:
        row = await self.store.get_task(task_id)
        if row is None:
            raise TaskNotFound(f"no task {task_id!r}")
        return TaskRecord.model_validate(row["body"])

    async def load_attempts(self, task_id: str) -> list[AttemptRecord]:
        return [AttemptRecord.from_row(r) for r in await self.store.attempts(task_id)]

    @staticmethod
    async def save(tx: Tx, task: TaskRecord, *attempts: AttemptRecord, at: datetime) -> None:
        await tx.put_task(
            task.id, state=task.state.value, body=task.model_dump(mode="json"), at=at,
            idempotency_key=task.idempotency_key, group_id=task.group_id,
        )  # fmt: skip
        for a in attempts:
            await tx.put_attempt(
                a.task_id, a.n, site=a.site, partition=a.partition, job_name=a.job_name,
                job_id=a.job_id, state=a.state.value, body=a.model_dump(mode="json"), at=at,
            )  # fmt: skip

    # -- placement --------------------------------------------------------------------------
    async def _history(self) -> list[WaitObservation]:
        out = []
        for row in await self.store.finished_attempts():
            a = AttemptRecord.from_row(row)
            if a.wait_s is not None and a.ended_at is not None:
                out.append(
                    WaitObservation(
                        site=a.site, partition=a.partition, gpus=a.shape.gpus, cpus=a.shape.cpus,
                        nodes=a.shape.nodes, wait_s=a.wait_s, observed_at=a.ended_at,
                    )
                )  # fmt: skip
        out.extend(estimates.user_waits(self))  # the user's other jobs, every partition
        return out

    async def wait_history(self) -> WaitHistory | None:
        """The learned estimator's index, built once per control cycle (on first use after
        `new_cycle`) and shared by every decision of that cycle."""
        if self._waits is None:
            history = await self._history()
            waits = WaitHistory(history, now=self.clock(), settings=Policy().settings)
            self.index_builds += 1
            self._waits = (waits if history else None,)
        return self._waits[0]

    def new_cycle(self) -> None:
        """A control cycle recorded what it observed: the next decision rebuilds the index."""
        self._waits = None
        self.estimator_errors = None

    def ledger(self) -> Ledger:
        """Claims of jobs dispatched after their site's last probe; older ones are dropped."""
        latest = self.collector.latest
        self.claims = [
            c for c in self.claims
            if c.site not in latest or c.done is None or c.done >= latest[c.site].collected_at
        ]  # fmt: skip
        ledger = Ledger()
        for c in self.claims:
            ledger.claim(c.site, c.partition, c.account, c.shape, c.charge)
        self.ended = [e for e in self.ended if self._counted(e)]
        for e in self.ended:
            ledger.release(e.site, e.partition)
        return ledger

    def _counted(self, e: Ended) -> bool:
        """Whether the site's last probe surely ran before the job ended (so counts it)."""
        state = self.collector.latest.get(e.site)
        if state is None:
            return False
        probed = state.collected_at.timestamp() + (state.latency_s or 0.0) + ENDED_MARGIN_S
        return e.at.timestamp() >= probed

    def mark_placed(self, site: str, partition: str) -> None:
        """A job goes to (site, partition): earlier scheduler answers there are stale."""
        self.placed_at[(site, partition)] = self.estimates.clock()
        self.estimates.drop_partition(site, partition)

    def envelope(
        self, task: TaskRecord, exclude: tuple[str, ...] = (), wall_s: int | None = None
    ) -> tuple[ResourceEnvelope, tuple[str, ...]]:
        """The task's envelope (with a longer wall time if asked) and the sites it must not
        use: excluded by it, by the caller or earlier rejections, or unable to hold its
        absolute workdir."""
        req = task.request
        env = req.envelope
        if wall_s is not None:
            hi = max(wall_s, env.wall_time.upper)
            env = env.model_copy(update={"wall_time": env.wall_time.model_copy(
                update={"min": wall_s, "max": hi})})  # fmt: skip
        known = set(self.sites)
        cannot_hold = workdirs.sites_without(req.workdir, self.sites)  # absolute workdir
        drop = tuple(sorted(((set(env.sites_exclude) | set(exclude) | set(task.excluded_sites))
                             & known - set(env.sites_include)) | cannot_hold))  # fmt: skip
        return env, drop

    def plan(
        self, task: TaskRecord, *, exclude: tuple[str, ...], wall_s: int | None,
        waits: WaitHistory | None, ledger: Ledger | None, errors: EstimatorErrors | None = None,
        score: tuple[tuple[str, str], ...] = (),
    ) -> tuple[Callable[[tuple[str, ...], SchedulerAnswer | None], Placement | Unschedulable],
               tuple[str, ...], Policy]:  # fmt: skip
        """How to place `task` now: a pure function of (sites to avoid, scheduler answers),
        the soft avoid list (siblings' sites), and the policy."""
        req = task.request
        env, drop = self.envelope(task, exclude, wall_s)
        known = set(self.sites)
        snapshot = ResourceSnapshot(taken_at=self.clock(), sites=dict(self.collector.latest))
        policy = Policy(kind=req.policy, site=req.fixed_site, fallback=req.fallback)
        now = self.clock()

        def attempt(
            avoid: tuple[str, ...], answer: SchedulerAnswer | None
        ) -> Placement | Unschedulable:
            e = env.model_copy(update={"sites_exclude": tuple(sorted(set(drop) | set(avoid)))})
            starts, notes = estimates.fresh(self, answer) if answer else (None, None)
            return place(e, snapshot, self.sites, policy, now=now, history=waits or (),
                         task_budget=req.task_budget, ledger=ledger, estimates=starts,
                         estimate_notes=notes, errors=errors, score=score)  # fmt: skip

        avoid = () if task.spread_relaxed else tuple(s for s in task.avoid_sites if s in known)
        if set(avoid) >= known - set(drop):
            avoid = ()  # every usable system already has a sibling: spreading cannot help
        return attempt, avoid, policy

    async def decide(
        self,
        task: TaskRecord,
        *,
        exclude: tuple[str, ...] = (),
        wall_s: int | None = None,
        history: WaitHistory | None = None,
        ledger: Ledger | None = None,
        answer: SchedulerAnswer | None = None,
        score: tuple[tuple[str, str], ...] = (),
    ) -> Placement | Unschedulable:
        """Place `task` on the live snapshot, without excluded sites, avoiding siblings' sites
        (soft: dropped when nothing else fits). A batch passes its `history`, `ledger` and the
        schedulers' `answer` for all its tasks; alone, the top candidates of a first pass are
        asked here (`estimates.ask`). `score` names partitions to score even when they cannot
        rank (where a job already waits)."""
        waits = history if history is not None else await self.wait_history()
        attempt, avoid, policy = self.plan(task, exclude=exclude, wall_s=wall_s, waits=waits,
                                           ledger=ledger, errors=await estimates.errors(self),
                                           score=score)  # fmt: skip
        # Placement is pure CPU work (a batch places dozens of tasks without an await between
        # them): a worker thread keeps the event loop serving inspect_federation meanwhile.
        if answer is None and estimates.asks_scheduler(policy):
            first = await anyio.to_thread.run_sync(attempt, avoid, None)
            if not isinstance(first, Placement) and avoid:
                first = await anyio.to_thread.run_sync(attempt, (), None)
            if not isinstance(first, Placement):
                return first  # no feasible candidate: nothing to ask about
            answer = await estimates.ask(self, [first])
        decision = await anyio.to_thread.run_sync(attempt, avoid, answer)
        if avoid and isinstance(decision, Unschedulable):
            decision = await anyio.to_thread.run_sync(attempt, (), answer)
        return decision

    async def decide_children(
        self, tasks: list[TaskRecord], *, history: WaitHistory | None, ledger: Ledger,
        answer: SchedulerAnswer | None,
    ) -> list[Placement | Unschedulable]:  # fmt: skip
        """Children of one group with the same request (`placer.child_key`), placed in one
        pass (`place_group`): each sees the earlier ones' claims, which `ledger` receives, no
        scheduler answer on a partition an earlier one took, and no site that reached its
        submissions for this cycle (as `decide` one by one). Not for spread groups: each child
        there avoids its siblings' systems."""
        first = tasks[0]
        req = first.request
        full = tuple(sorted(s for s, n in self.placed_this_cycle.items()
                            if n >= self.submits_per_cycle))  # fmt: skip
        env, drop = self.envelope(first, full)
        env = env.model_copy(update={"sites_exclude": drop})
        # The per-site bound on submissions per control cycle, as `decide` one by one has it.
        caps = {s: self.submits_per_cycle - self.placed_this_cycle[s] for s in self.sites}
        snapshot = ResourceSnapshot(taken_at=self.clock(), sites=dict(self.collector.latest))
        policy = Policy(kind=req.policy, site=req.fixed_site, fallback=req.fallback)
        starts, notes = estimates.fresh(self, answer) if answer else (None, None)
        errors = await estimates.errors(self)
        now = self.clock()

        def run() -> list[Placement | Unschedulable]:
            return place_group([env] * len(tasks), snapshot, self.sites, policy, now=now,
                               history=history or (), estimates=starts, estimate_notes=notes,
                               errors=errors, task_budget=req.task_budget, ledger=ledger,
                               site_caps=caps)  # fmt: skip

        # Pure CPU work: a worker thread keeps the event loop serving meanwhile (as `decide`).
        return await anyio.to_thread.run_sync(run)

    @staticmethod
    def summary(p: Placement) -> str:
        e = p.estimates
        return (
            workdirs.fallback_note(p)
            + f"{p.site}/{p.partition} ({p.trace.policy.kind.value}): est. wait {e.wait_s:.0f}s "
            f"({e.wait_source}) + run {e.runtime_s:.0f}s; {p.trace.feasible} feasible of "
            f"{len(p.trace.candidates)} candidates" + _pruned(p)
        )

    # -- dispatch ---------------------------------------------------------------------------
    @staticmethod
    def _workbase(adapter: SiteAdapter) -> str:
        """Where the site's task folders go: the user's `workdir`, else `<scratch>/<login>/fedhpc`
        (a `$NAME` root such as TACC's `$SCRATCH` is the user's own: `<it>/fedhpc`). Raises
        `WorkdirFailed` when a `$NAME` root cannot be expanded."""
        site = adapter.site
        if site.user.workdir:
            return site.user.workdir.rstrip("/")
        roots = {r.name: r.path for r in site.profile.storage}
        root = roots.get("scratch") or roots.get("work") or next(iter(roots.values()), "/tmp")  # noqa: S108
        path = adapter.root_path(root)
        own = site.profile.local_test or path != root
        return f"{path}/fedhpc" if own else f"{path}/{adapter.login}/fedhpc"

    async def dispatch(self, task: TaskRecord, p: Placement) -> AttemptRecord:
        """Persist the intent, submit, persist the job id. A crash between the two writes is
        resolved by `find` on the job name, so nothing is ever submitted twice."""
        now = self.clock()
        adapter = self.adapters[p.site]
        n = task.attempts_made + 1
        req = task.request
        if adapter.roots is None:  # the probe could not read them: once more, now
            await adapter.read_roots()
        try:
            base = f"{self._workbase(adapter)}/{task.id}"
        except WorkdirFailed as exc:
            return await self._folderless(task, p, n, exc)
        workdir = resolve_workdir(req.workdir, base, adapter.site.profile)
        att = AttemptRecord(
            task_id=task.id, n=n, site=p.site, partition=p.partition, account=p.account,
            qos=p.qos, shape=p.shape, job_name=job_name(task.id, n), created_at=now,
            estimate_s=p.estimates.completion_s, predicted_waits=dict(p.estimates.wait_by),
            wait_source=p.estimates.wait_source, stdout=f"{base}/{n}.out",
            stderr=f"{base}/{n}.err", workdir=workdir,
        )  # fmt: skip
        task.attempts_made = n
        task.decision = self.summary(p)
        task.provenance = self.provenance(req.envelope, p)  # re-placements too: never stale
        if task.state is JobState.QUEUED:
            task.state = JobState.SUBMITTED
        async with self.store.transaction() as tx:
            await self.save(tx, task, att, at=now)
        claim = Claim(now, p.site, p.partition, p.account, p.shape, p.estimates.charge)
        self.claims.append(claim)
        self.mark_placed(p.site, p.partition)
        spec = JobSpec(
            name=att.job_name, command=req.command, partition=p.partition, shape=p.shape,
            account=p.account, qos=p.qos, workdir=att.workdir, stdout=att.stdout,
            stderr=att.stderr, env=req.env, container_image=req.container_image,
        )  # fmt: skip
        try:
            job = await adapter.submit(spec, ensure_dirs=sorted({base, att.workdir or base}))
        except (SchedulerRejected, WorkdirFailed) as exc:
            att.state, att.reason, att.ended_at = JobState.FAILED, exc.message, self.clock()
            self.claims = [c for c in self.claims if c is not claim]  # never reached a queue
        except GlobusLoginRequired as exc:
            self.claims = [c for c in self.claims if c is not claim]
            # Refused before anything ran (no login, a missing consent): the reason carries
            # the exact `fedhpc login` command, so the woken agent can ask the person for it.
            att.state, att.ended_at = JobState.FAILED, self.clock()
            att.reason = f"{exc.message}. {exc.hint}"
        except TransportError as exc:
            # Unknown whether sbatch ran: the intent stays; the next cycle looks it up by name.
            log.warning("submit outcome unknown", task=task.id, site=p.site, error=exc.message)
            claim.done = self.clock()  # it may be queued: counted until the next probe
            return att
        except BaseException:
            claim.done = self.clock()  # whatever happened, the claim ends with the next probe
            raise
        else:
            att.job_id, att.submitted_at = job.job_id, self.clock()
            claim.done = att.submitted_at
            log.info("dispatched", task=task.id, attempt=n, site=p.site, job_id=job.job_id)
        async with self.store.transaction() as tx:
            await self.save(tx, task, att, at=self.clock())
        return att

    async def _folderless(
        self, task: TaskRecord, p: Placement, n: int, exc: WorkdirFailed
    ) -> AttemptRecord:
        """An attempt that failed before any folder or job existed (its site's storage root
        cannot be expanded): recorded as failed with the reason, like a refused `mkdir`."""
        now = self.clock()
        att = AttemptRecord(
            task_id=task.id, n=n, site=p.site, partition=p.partition, account=p.account,
            qos=p.qos, shape=p.shape, job_name=job_name(task.id, n), created_at=now,
            state=JobState.FAILED, reason=exc.message, ended_at=now,
        )  # fmt: skip
        task.attempts_made = n
        task.decision = self.summary(p)
        async with self.store.transaction() as tx:
            await self.save(tx, task, att, at=now)
        return att

    # -- events -----------------------------------------------------------------------------
    async def emit(self, tx: Tx, kind: str, task: TaskRecord, *, key: str | None = None,
                   **payload: object) -> None:  # fmt: skip
        """One event per registered fact, keyed so it can never be written twice (per task,
        or per `key` for a fact that can recur, such as one attempt's lost site)."""
        body: dict[str, object] = {"task_id": task.id, "state": task.state.value,
                                   "result": f"fedhpc://tasks/{task.id}"}  # fmt: skip
        if task.group_id:
            body["group_id"] = task.group_id
        body.update({k: v for k, v in payload.items() if v is not None})
        # A task replan reopened reports its new outcome as a new fact, not a duplicate.
        base = f"{kind}:{task.id}" + (f":reopened{task.reopened}" if task.reopened else "")
        await tx.append_event(kind, task.id, body, at=self.clock(),
                              key=base + (f":{key}" if key else ""))  # fmt: skip

    # -- submit -----------------------------------------------------------------------------
    def handle(self, task: TaskRecord, att: AttemptRecord | None) -> TaskHandle:
        return TaskHandle(
            task_id=task.id, state=task.state, site=att.site if att else None,
            partition=att.partition if att else None, account=att.account if att else None,
            shape=att.shape if att else None, job_id=att.job_id if att else None,
            attempt=att.n if att else 0, decision=task.decision, reasons=task.reasons,
            transfers=staging.stage_out_ids(task),
        )  # fmt: skip

    async def submit_task(
        self, req: SubmitTaskRequest, *, wait_s: float = PLACE_WAIT_S
    ) -> TaskHandle:
        """Accept the task durably (queued, or the earlier task a retry matches), wake the
        placer, and answer within `wait_s`: with the placement if it came by then."""
        handle, fresh = await self.accept_task(req)
        if not fresh:
            return handle
        self.placer_wake.set()
        if wait_s > 0:
            await self.wait_placed(handle.task_id, wait_s)
        task = await self.load_task(handle.task_id)
        atts = [a for a in await self.load_attempts(task.id) if not a.superseded]
        return self.handle(task, atts[-1] if atts else None)

    async def accept_task(self, req: SubmitTaskRequest) -> tuple[TaskHandle, bool]:
        """(the handle, True) for a new queued task; (the earlier task's handle, False) when
        this call is a retry of an earlier one (see `idem`)."""
        dedupe = idem.dedupe_key(req)
        async with self.accepting:
            now = self.clock()
            row = await self.store.task_by_key(req.idempotency_key) if req.idempotency_key else None
            by_key = row is not None
            if row is None and dedupe is not None:
                row = await self.store.task_by_dedupe(dedupe, idem.since(now, self.retry_window_s))
            if row is not None:
                return await self._existing(row, req, by_key=by_key, now=now), False
            task = TaskRecord(
                id=new_id("t"), request=req, state=JobState.QUEUED, created_at=now,
                idempotency_key=req.idempotency_key or f"auto:{new_id('k')}",
                decision="queued: placing" if self.collector.ready.is_set() else WAITING_FOR_PROBES,
            )  # fmt: skip
            if staging.declared(task):
                task.state = JobState.SUBMITTED  # staging.advance queues it when inputs arrive
                if await staging.prepare(self, task):
                    task.state = JobState.QUEUED
            async with self.store.transaction() as tx:
                await tx.put_task(
                    task.id, state=task.state.value, body=task.model_dump(mode="json"), at=now,
                    idempotency_key=task.idempotency_key, dedupe=dedupe,
                )  # fmt: skip
                if req.continuation is not None:
                    await self.put_continuation(tx, task.id, req.continuation)
        self.notify()
        return self.handle(task, None), True

    async def _existing(
        self, row: dict[str, object], req: SubmitTaskRequest, *, by_key: bool, now: datetime
    ) -> TaskHandle:
        task = TaskRecord.model_validate(row["body"])
        if by_key and idem.request_digest(task.request) != idem.request_digest(req):
            raise idem.IdempotencyConflict(
                f"idempotency_key {req.idempotency_key!r} already names task {task.id}, "
                "submitted with other arguments"
            )
        atts = [a for a in await self.load_attempts(task.id) if not a.superseded]
        handle = self.handle(task, atts[-1] if atts else None)
        note = idem.existing_note(
            "task", task.id, task.created_at, task.state.value, by_key=by_key,
            window_s=self.retry_window_s, now=now,
        )  # fmt: skip
        update: dict[str, object] = {"existing": note}
        if task.state.terminal:
            update["next"] = (
                f"It already ended ({task.state.value}): its result is available now with "
                f'get_result(task_id="{task.id}"). No event will follow for it.'
            )
        return handle.model_copy(update=update)

    async def wait_placed(self, task_ids: str | list[str], wait_s: float) -> None:
        """Wait until none of `task_ids` is queued any more, or `wait_s` has passed."""
        ids = [task_ids] if isinstance(task_ids, str) else task_ids
        with anyio.move_on_after(wait_s):
            while True:
                progress = self.progress
                rows = [await self.store.get_task(t) for t in ids]
                if all(r is None or r["state"] != JobState.QUEUED.value for r in rows):
                    return
                await progress.wait()

    async def register(self, subject: str, spec: ContinuationSpec) -> str:
        """Attach a continuation to a task or group (idempotent per subject and spec)."""
        async with self.store.transaction() as tx:
            return await self.put_continuation(tx, subject, spec)

    async def put_continuation(self, tx: Tx, subject: str, spec: ContinuationSpec) -> str:
        """The continuation row, in the caller's transaction (with the task it wakes for)."""
        return await put_continuation(tx, subject, spec, at=self.clock())

    async def unschedulable(self, task: TaskRecord, u: Unschedulable) -> TaskHandle:
        task.state = JobState.UNSCHEDULABLE
        task.reasons = (u.hint, *(f"{r.id}: {'; '.join(r.reasons)}" for r in u.reasons[:8]))
        task.decision = f"unschedulable: {u.hint}"
        async with self.store.transaction() as tx:
            await self.save(tx, task, at=self.clock())
            await self.emit(tx, "task.unschedulable", task, reason=u.hint)
        return self.handle(task, None)

    @staticmethod
    def provenance(env: ResourceEnvelope, p: Placement) -> Provenance:
        draft = env.draft
        return Provenance(
            envelope_source=(draft.source if draft else DraftSource.USER).value,
            rationale=draft.rationale if draft else "",
            confidence=draft.confidence if draft else None,
            policy=p.trace.policy.kind.value,
            decision=Orchestrator.summary(p),
            candidates=len(p.trace.candidates),
            feasible=p.trace.feasible,
            pruned=p.trace.pruned_partitions(),
        )

    async def run(self, stopping: anyio.Event) -> None:
        """Control cycles and the placer, until `stopping` is set."""
        from fedhpc.orchestrator.placer import run_placer

        async with anyio.create_task_group() as tg:
            tg.start_soon(run_placer, self, stopping, name="placer")
            tg.start_soon(self._cycles, stopping, name="control")

    async def _cycles(self, stopping: anyio.Event) -> None:
        """Control cycles until `stopping` is set; `wake` starts one early."""
        from fedhpc.orchestrator.control import tick

        await self.collector.ready.wait()  # never act on a view from before this process
        while not stopping.is_set():
            started = anyio.current_time()
            try:
                await tick(self)
            except Exception:  # a bad cycle is logged and retried, never fatal to the daemon
                log.exception("control cycle failed")
            # Cycles start every cycle_s (not cycle_s after the last one ended): a slow cycle
            # does not stretch the interval the continuation latency is measured against.
            with anyio.move_on_after(max(0.0, started + self.cycle_s - anyio.current_time())):
                await self.wake.wait()
            self.wake = anyio.Event()
        self.placer_wake.set()  # stopping: the placer ends its wait too

    def offline(self, site: str) -> bool:
        """Known to be unreachable (not merely not probed yet)."""
        state = self.collector.latest.get(site)
        return state is not None and state.health is Health.OFFLINE

    def online(self, site: str) -> bool:
        state = self.collector.latest.get(site)
        return state is not None and state.health is not Health.OFFLINE
