"""Dispatch: one placed task handed to its site's scheduler, durably (the intent is written
before the submission, the job id after it), with a claim on the ledger until a probe shows it.
The writes happen under the orchestrator's lock, the scheduler call never: a slow or dead
site's sbatch holds up no other site's work."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import anyio
import structlog

from fedhpc.adapters.arrays import ArrayJob
from fedhpc.adapters.site import SiteAdapter, StorageUnread, SubmittedJob, WorkdirFailed
from fedhpc.adapters.transports.base import TransportError
from fedhpc.domain.job import JobSpec, JobState, job_comment
from fedhpc.globus_auth.errors import GlobusLoginRequired
from fedhpc.logs import isolated
from fedhpc.orchestrator.book import TaskBook
from fedhpc.orchestrator.claims import Claim, Claims
from fedhpc.orchestrator.estimates import WaitInputs
from fedhpc.orchestrator.planner import brief, provenance
from fedhpc.orchestrator.records import AttemptRecord, TaskRecord, array_name, job_name
from fedhpc.orchestrator.site_paths import (
    arrays_dir,
    check_outputs,
    outside_roots,
    task_workdir,
    workbase,
)
from fedhpc.placement import Placement
from fedhpc.settings import JOB_FOR

__all__ = ["LOGIN_REQUIRED", "Dispatcher", "Intent", "outside_roots"]

log = structlog.get_logger(__name__)

# The start of an attempt's reason when a site needs a person to log in first (its hint has
# the command): the person's move, never a refusal to wait out (orchestrator/submitter.py).
LOGIN_REQUIRED = "login required"

ROOTS_RETRY_S = 5.0  # an unread site's `$NAME` roots: at most one read per this, not one per task


@dataclass(frozen=True, eq=False)
class Intent:
    """An attempt written before its job is submitted: what `Dispatcher.send` submits."""

    att: AttemptRecord
    spec: JobSpec
    dirs: list[str]  # made first, in the same remote call
    claim: Claim


class Dispatcher:
    """Submits placed tasks through `adapters`, recording each attempt in `book`; `lock` is the
    orchestrator's, held for the writes and never for a scheduler call."""

    def __init__(
        self,
        book: TaskBook,
        adapters: Mapping[str, SiteAdapter],
        claims: Claims,
        waits: WaitInputs,
        *,
        lock: anyio.Lock,
        clock: Callable[[], datetime],
    ) -> None:
        self.book = book
        self.adapters = adapters
        self.claims = claims
        self.waits = waits
        self.lock = lock
        self.clock = clock
        # Job names of intents this process wrote and has not recorded the submission of yet:
        # the control cycle never takes one of them for an intent a crash lost (`Control`).
        self.in_flight: set[str] = set()
        self.deferred: list[Intent] = []  # written by `later`, submitted by `send_later`

    _workbase = staticmethod(workbase)  # the name tests and callers know

    async def dispatch(self, task: TaskRecord, p: Placement) -> AttemptRecord:
        """One placed task, by a caller that does not hold the lock: the intent is written
        under it, the job submitted without it, its id recorded under it again."""
        async with self.lock:
            prepared = await self.prepare(task, p)
        if isinstance(prepared, AttemptRecord):
            return prepared
        return await self.complete(prepared)

    async def later(
        self, task: TaskRecord, p: Placement, *, note: str = "", copy_of: int | None = None
    ) -> None:
        """Under the lock (the control cycle's adaptation): the intent is written now, the job
        submitted once the lock is released (`send_later`); `note` and `copy_of` as `prepare`."""
        prepared = await self.prepare(task, p, note=note, copy_of=copy_of)
        if isinstance(prepared, Intent):
            self.deferred.append(prepared)

    async def send_later(self) -> None:
        """Without the lock: every intent `later` wrote, each site's in one remote call, the
        sites concurrently, each outcome recorded under the lock; one site's failure is its
        own (its intents stay for the cycle to find)."""
        deferred, self.deferred = self.deferred, []
        by_site: dict[str, list[Intent]] = {}
        for intent in deferred:
            by_site.setdefault(intent.att.site, []).append(intent)
        async with anyio.create_task_group() as tg:
            for site, intents in by_site.items():
                tg.start_soon(self._complete_alone, intents, name=f"submit:{site}")

    async def _complete_alone(self, intents: list[Intent]) -> None:
        with isolated("submission failed", site=intents[0].att.site, jobs=len(intents)):
            await self.complete_many(intents)

    async def prepare(
        self, task: TaskRecord, p: Placement, *, note: str = "", copy_of: int | None = None
    ) -> Intent | AttemptRecord:
        """Under the lock: the intent (attempt n, no job id yet) written before anything is
        submitted, so a crash after it is resolved by `find` on the job name and nothing is
        ever submitted twice; or the attempt that failed before any folder or job existed.
        The task's decision becomes `p`'s, with `note` (a hedge's); a hedged copy (`copy_of`:
        the attempt it hedges) leaves the decision as its first attempt wrote it."""
        now = self.clock()
        adapter = self.adapters[p.site]
        n = task.attempts_made + 1
        req = task.request
        if adapter.roots is None:  # the probe could not read them: once more (not per task)
            await adapter.read_roots(unless_within_s=ROOTS_RETRY_S)
        try:
            base = f"{self._workbase(adapter)}/{task.id}"
            workdir = task_workdir(adapter, req.workdir, base)
            check_outputs(adapter, req.outputs)
        except (WorkdirFailed, StorageUnread) as exc:
            return await self._folderless(task, p, n, exc, note=note, copy_of=copy_of)
        att = _attempt(
            task,
            p,
            n,
            now,
            estimate_s=p.estimates.completion_s,
            predicted_wait_s=p.estimates.wait_s,
            predicted_waits=dict(p.estimates.wait_by),
            wait_source=p.estimates.wait_source,
            stdout=f"{base}/{n}.out",
            stderr=f"{base}/{n}.err",
            workdir=workdir,
        )
        att.copy_of = copy_of
        task.attempts_made = n
        _decided(task, p, note, copy_of)
        if task.state is JobState.QUEUED:
            task.state = JobState.SUBMITTED
        async with self.book.store.transaction() as tx:
            await self.book.save(tx, task, att, at=now)
        claim = Claim(now, p.site, p.partition, p.account, p.shape, p.estimates.charge)
        self.claims.dispatched.append(claim)
        self.waits.mark_placed(p.site, p.partition, p.shape, task.id)
        spec = JobSpec(
            name=att.job_name,
            command=req.command,
            partition=p.partition,
            shape=p.shape,
            account=p.account,
            qos=p.qos,
            workdir=att.workdir,
            stdout=att.stdout,
            stderr=att.stderr,
            env=_env_for(req.env, task.owner),
            container_image=req.container_image,
            comment=None if task.owner is None else job_comment(task.owner),
        )
        self.in_flight.add(att.job_name)
        return Intent(att, spec, sorted({base, att.workdir or base}), claim)

    async def complete(self, intent: Intent) -> AttemptRecord:
        """Without the lock: submit a written intent, then record what came of it under the
        lock (`record`). The attempt as recorded."""
        return (await self.complete_many([intent]))[0]

    async def complete_many(self, intents: Sequence[Intent]) -> list[AttemptRecord]:
        """Without the lock: written intents for ONE site, submitted in one remote call
        (`send_many`), then each outcome recorded under the lock, alone: one that cannot be
        recorded stays an intent (the control cycle looks its job up by name). The attempts as
        recorded, in order."""
        try:
            outcomes = await self.send_many(intents)
            out = []
            async with self.lock:
                for intent, outcome in zip(intents, outcomes, strict=True):
                    att = intent.att
                    with isolated("recording a submission failed", task=att.task_id, n=att.n):
                        att = await self.record(intent, outcome)
                    out.append(att)
            return out
        finally:
            for intent in intents:
                self.in_flight.discard(intent.att.job_name)

    async def join_array(self, intents: Sequence[Intent]) -> list[Intent]:
        """Under the lock: intents of ONE site with equal jobs but for their commands and
        folders become one array before anything is submitted: each attempt, as stored now,
        records the array's name and its index in the same transaction, so a leader killed
        mid-submit finds the array by its name (`Control`) and never submits a member twice.
        The members, in index order; an intent a cancel or replan ended meanwhile is left out
        (submitted alone, as it would have been)."""
        name = array_name(intents[0].att.job_name)
        members: list[Intent] = []
        stored_now: list[AttemptRecord] = []
        for intent in intents:
            att = intent.att
            stored = next(
                (a for a in await self.book.load_attempts(att.task_id) if a.n == att.n), None
            )
            if stored is None or stored.job_id or stored.superseded or stored.state.terminal:
                continue
            stored.array_name = att.array_name = name
            stored.array_index = att.array_index = len(members)
            members.append(intent)
            stored_now.append(stored)
        if len(members) < 2:
            for intent in members:
                intent.att.array_name = intent.att.array_index = None
            return []
        async with self.book.store.transaction() as tx:
            await self.book.save_attempts(tx, *stored_now, at=self.clock())
        return members

    async def send_many(self, intents: Sequence[Intent]) -> list[SubmittedJob | Exception]:
        """The scheduler call for intents of ONE site, one remote call for all of them, never
        under the lock (a dead site's sbatch holds up nothing else). Per intent: the job, or
        the error that says why there is none (refused, its folder not made, a login needed)
        or that whether there is one is unknown (a transport error, or no answer for it)."""
        site = intents[0].att.site
        adapter = self.adapters[site]
        try:
            got = await adapter.submit_many(self._entries(adapter, intents))
        except (GlobusLoginRequired, TransportError) as exc:
            return [exc] * len(intents)
        except BaseException:  # whatever happened, the claims end with the next probe
            for intent in intents:
                intent.claim.done = self.clock()
            raise
        return [
            TransportError(f"no answer for {i.att.job_name} from {site}'s batched submission")
            if outcome is None
            else outcome
            for i, outcome in zip(intents, got, strict=True)
        ]

    def _entries(
        self, adapter: SiteAdapter, intents: Sequence[Intent]
    ) -> list[tuple[JobSpec, Sequence[str]] | ArrayJob]:
        """The submission's entries: each intent alone, but the members of an array (equal
        `array_name`, in a row, as `join_array` ordered them) as one `ArrayJob`."""
        out: list[tuple[JobSpec, Sequence[str]] | ArrayJob] = []
        i = 0
        while i < len(intents):
            name = intents[i].att.array_name
            j = i + 1
            while name is not None and j < len(intents) and intents[j].att.array_name == name:
                j += 1
            if name is None or j - i < 2:
                out.extend((x.spec, x.dirs) for x in intents[i:j])
            else:
                run = intents[i:j]
                dirs = sorted({d for x in run for d in x.dirs})
                arrays = arrays_dir(adapter)
                out.append(ArrayJob(name, [x.spec for x in run], dirs, arrays))
            i = j
        return out

    async def record(self, intent: Intent, outcome: SubmittedJob | Exception) -> AttemptRecord:
        """Under the lock: the outcome merged into the attempt as stored now, which may have
        changed while it was submitted (a control cycle bound its job by name; a cancel, a
        replan or a lost site superseded it): a job id never replaces one, a refusal never
        ends an attempt that has a job, and its task is never written from a stale copy."""
        att, claim, now = intent.att, intent.claim, self.clock()
        stored = next((a for a in await self.book.load_attempts(att.task_id) if a.n == att.n), att)
        if isinstance(outcome, SubmittedJob):
            claim.done = now
            if stored.job_id is None:
                stored.job_id, stored.submitted_at = outcome.job_id, now
            log.info(
                "dispatched", task=att.task_id, attempt=att.n, site=att.site, job_id=outcome.job_id
            )
        elif isinstance(outcome, TransportError):
            # Unknown whether sbatch ran: the intent stays; the next cycle looks it up by name.
            log.warning(
                "submit outcome unknown", task=att.task_id, site=att.site, error=outcome.message
            )
            claim.done = now  # it may be queued: counted until the next probe
            return stored
        else:
            self.claims.drop(claim)  # never reached a queue
            if stored.job_id is not None or stored.state.terminal:
                return stored
            stored.state, stored.ended_at = JobState.FAILED, now
            if isinstance(outcome, GlobusLoginRequired):
                # Refused before anything ran (no login, a missing consent): the reason carries
                # the exact `fedhpc login` command, so the woken agent can ask the person for it.
                stored.reason = f"{LOGIN_REQUIRED}: {outcome.message}. {outcome.hint}"
            else:
                stored.reason = getattr(outcome, "message", str(outcome))
        async with self.book.store.transaction() as tx:
            await self.book.save_attempts(tx, stored, at=now)
        return stored

    async def _folderless(
        self,
        task: TaskRecord,
        p: Placement,
        n: int,
        exc: WorkdirFailed | StorageUnread,
        *,
        note: str,
        copy_of: int | None,
    ) -> AttemptRecord:
        """An attempt that failed before any folder or job existed: its site's storage root is
        unset there (final, like a refused `mkdir`) or could not be read yet (the placer tries
        the next site, as for a refusal). Recorded as failed with the reason; the task's
        decision and its provenance both become `p`'s, as for an attempt that was submitted
        (a provenance left at an earlier placement contradicted the decision beside it)."""
        now = self.clock()
        att = _attempt(task, p, n, now, state=JobState.FAILED, reason=exc.message, ended_at=now)
        att.copy_of = copy_of
        task.attempts_made = n
        _decided(task, p, note, copy_of)
        async with self.book.store.transaction() as tx:
            await self.book.save(tx, task, att, at=now)
        return att


def _decided(task: TaskRecord, p: Placement, note: str, copy_of: int | None) -> None:
    """The task's decision and its provenance become `p`'s (with `note`, a hedge's), together:
    on every re-placement, never stale; a hedged copy (`copy_of`) leaves both as they were."""
    if copy_of is None:
        task.decision = brief(p) + (f"; {note}" if note else "")
        task.provenance = provenance(task.request.envelope, p, note)


def _attempt(
    task: TaskRecord,
    p: Placement,
    n: int,
    now: datetime,
    *,
    state: JobState = JobState.SUBMITTED,
    reason: str | None = None,
    ended_at: datetime | None = None,
    estimate_s: float | None = None,
    predicted_wait_s: float | None = None,
    predicted_waits: dict[str, float] | None = None,
    wait_source: str | None = None,
    stdout: str | None = None,
    stderr: str | None = None,
    workdir: str | None = None,
) -> AttemptRecord:
    """Attempt `n` of `task` where `p` placed it, created `now`: an intent (`submitted`, with
    the placement's estimates and the job's files) or one that failed before any job existed
    (`state`, `reason`, `ended_at`)."""
    return AttemptRecord(
        task_id=task.id,
        n=n,
        site=p.site,
        partition=p.partition,
        account=p.account,
        qos=p.qos,
        shape=p.shape,
        job_name=job_name(task.id, n),
        created_at=now,
        state=state,
        reason=reason,
        ended_at=ended_at,
        estimate_s=estimate_s,
        predicted_wait_s=predicted_wait_s,
        predicted_waits=predicted_waits or {},
        wait_source=wait_source,
        stdout=stdout,
        stderr=stderr,
        workdir=workdir,
    )


def _env_for(env: Mapping[str, str], owner: str | None) -> dict[str, str]:
    """The job's environment: the daemon's FEDHPC_FOR names the task's owner, and only it. A
    value the request itself sent is dropped: at a per-person site it picks whose token the
    job is submitted with (`adapters.by_person`)."""
    mine = {k: v for k, v in env.items() if k != JOB_FOR.name}
    return mine if owner is None else {**mine, JOB_FOR.name: owner}
