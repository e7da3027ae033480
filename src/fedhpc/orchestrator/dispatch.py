"""Dispatch: one placed task handed to its site's scheduler, durably (the intent is written
before the submission, the job id after it), with a claim on the ledger until a probe shows it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

import structlog

from fedhpc.adapters.dialects.base import SchedulerRejected
from fedhpc.adapters.site import SiteAdapter, StorageUnread, WorkdirFailed
from fedhpc.adapters.transports.base import TransportError
from fedhpc.domain.job import JobSpec, JobState
from fedhpc.globus_auth.errors import GlobusLoginRequired
from fedhpc.ops.workdir import WorkdirOutside, confined, resolve_workdir
from fedhpc.orchestrator.book import TaskBook
from fedhpc.orchestrator.claims import Claim, Claims
from fedhpc.orchestrator.estimates import WaitInputs
from fedhpc.orchestrator.planner import provenance, summary
from fedhpc.orchestrator.records import AttemptRecord, TaskRecord, job_name
from fedhpc.placement import Placement

__all__ = ["LOGIN_REQUIRED", "Dispatcher", "outside_roots"]

log = structlog.get_logger(__name__)

# The start of an attempt's reason when a site needs a person to log in first (its hint has
# the command): the person's move, never a refusal to wait out (orchestrator/submitter.py).
LOGIN_REQUIRED = "login required"

ROOTS_RETRY_S = 5.0  # an unread site's `$NAME` roots: at most one read per this, not one per task


class Dispatcher:
    """Submits placed tasks through `adapters`, recording each attempt in `book`."""

    def __init__(
        self,
        book: TaskBook,
        adapters: Mapping[str, SiteAdapter],
        claims: Claims,
        waits: WaitInputs,
        *,
        clock: Callable[[], datetime],
    ) -> None:
        self.book = book
        self.adapters = adapters
        self.claims = claims
        self.waits = waits
        self.clock = clock

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
        if adapter.roots is None:  # the probe could not read them: once more (not per task)
            await adapter.read_roots(unless_within_s=ROOTS_RETRY_S)
        try:
            base = f"{self._workbase(adapter)}/{task.id}"
            workdir = _workdir(adapter, req.workdir, base)
            _check_outputs(adapter, req.outputs)
        except (WorkdirFailed, StorageUnread) as exc:
            return await self._folderless(task, p, n, exc)
        att = _attempt(
            task,
            p,
            n,
            now,
            estimate_s=p.estimates.completion_s,
            predicted_waits=dict(p.estimates.wait_by),
            wait_source=p.estimates.wait_source,
            stdout=f"{base}/{n}.out",
            stderr=f"{base}/{n}.err",
            workdir=workdir,
        )
        task.attempts_made = n
        task.decision = summary(p)
        task.provenance = provenance(req.envelope, p)  # re-placements too: never stale
        if task.state is JobState.QUEUED:
            task.state = JobState.SUBMITTED
        async with self.book.store.transaction() as tx:
            await self.book.save(tx, task, att, at=now)
        claim = Claim(now, p.site, p.partition, p.account, p.shape, p.estimates.charge)
        self.claims.dispatched.append(claim)
        self.waits.mark_placed(p.site, p.partition)
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
            env=req.env,
            container_image=req.container_image,
        )
        try:
            job = await adapter.submit(spec, ensure_dirs=sorted({base, att.workdir or base}))
        except (SchedulerRejected, WorkdirFailed) as exc:
            att.state, att.reason, att.ended_at = JobState.FAILED, exc.message, self.clock()
            self.claims.drop(claim)  # never reached a queue
        except GlobusLoginRequired as exc:
            self.claims.drop(claim)
            # Refused before anything ran (no login, a missing consent): the reason carries
            # the exact `fedhpc login` command, so the woken agent can ask the person for it.
            att.state, att.ended_at = JobState.FAILED, self.clock()
            att.reason = f"{LOGIN_REQUIRED}: {exc.message}. {exc.hint}"
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
        async with self.book.store.transaction() as tx:
            await self.book.save(tx, task, att, at=self.clock())
        return att

    async def _folderless(
        self, task: TaskRecord, p: Placement, n: int, exc: WorkdirFailed | StorageUnread
    ) -> AttemptRecord:
        """An attempt that failed before any folder or job existed: its site's storage root is
        unset there (final, like a refused `mkdir`) or could not be read yet (the placer tries
        the next site, as for a refusal). Recorded as failed with the reason."""
        now = self.clock()
        att = _attempt(task, p, n, now, state=JobState.FAILED, reason=exc.message, ended_at=now)
        task.attempts_made = n
        task.decision = summary(p)
        async with self.book.store.transaction() as tx:
            await self.book.save(tx, task, att, at=now)
        return att


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
        predicted_waits=predicted_waits or {},
        wait_source=wait_source,
        stdout=stdout,
        stderr=stderr,
        workdir=workdir,
    )


def _workdir(adapter: SiteAdapter, workdir: str | None, base: str) -> str:
    """The task's folder at the site; an absolute `workdir` must lie in a root as the site's
    shell expanded it (placement could not tell for a `$NAME` root: now it can)."""
    roots = _roots(adapter) if (workdir or "").startswith("/") else None
    try:
        return resolve_workdir(workdir, base, adapter.site.profile, roots)
    except WorkdirOutside as exc:
        raise WorkdirFailed(
            f"{WorkdirFailed.PREFIX} on {adapter.name}: {exc.message}",
            hint="Give a workdir inside one of these roots, or relative to the task's folder.",
        ) from None


def _check_outputs(adapter: SiteAdapter, outputs: Sequence[str]) -> None:
    """Absolute outputs must lie in a root as the site's shell expanded it, like `workdir`: their
    sizes are reported back, which would tell whether any file there exists."""
    absolute = [(i, o) for i, o in enumerate(outputs) if o.startswith("/")]
    if not absolute:
        return
    roots = _roots(adapter)
    for i, path in absolute:
        if not confined(path, roots):
            listed = ", ".join(roots) or "none"
            raise WorkdirFailed(
                f"{WorkdirFailed.PREFIX} on {adapter.name}: outputs[{i}] {path} is inside no "
                f"storage root of {adapter.name} ({listed})",
                hint="Give outputs relative to workdir, or inside one of these roots.",
            )


def outside_roots(adapter: SiteAdapter, paths: Sequence[str]) -> set[str]:
    """The absolute `paths` inside none of the site's storage roots as its shell expands them
    (every absolute one while they cannot be read): never to be looked at on the site."""
    absolute = {p for p in paths if p.startswith("/")}
    if not absolute:
        return set()
    try:
        roots = _roots(adapter)
    except StorageUnread:
        return absolute
    return {p for p in absolute if not confined(p, roots)}


def _roots(adapter: SiteAdapter) -> list[str]:
    """The site's storage roots as paths there; a `$NAME` root unset in its shell is named as
    such (it holds nothing: no path is guessed for it). Raises `StorageUnread` while unread."""
    out = []
    for r in adapter.site.profile.storage:
        try:
            out.append(adapter.root_path(r.path))
        except WorkdirFailed:
            out.append(f"{r.path} (not expanded)")
    return out
