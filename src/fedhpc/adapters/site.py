"""A site adapter joins a profile, its scheduler dialect and its transport: the only code that
talks to a site."""

from __future__ import annotations

import getpass
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from itertools import islice

import structlog

from fedhpc.adapters.arrays import ArrayJob, array_dialect
from fedhpc.adapters.by_person import submit_by_person
from fedhpc.adapters.command import Command, CommandResult, iter_lines
from fedhpc.adapters.dialects import Dialect, get_dialect
from fedhpc.adapters.dialects.base import SchedulerRejected
from fedhpc.adapters.liveness import (
    ACCOUNTING_ASKS_CONTROLLER,
    PING_TIMEOUT_S,
    ControllerDown,
    down_in,
    gated,
    ping_of,
)
from fedhpc.adapters.pace import CommandPace
from fedhpc.adapters.site_errors import CommandFailed, StorageUnread, WorkdirFailed
from fedhpc.adapters.site_files import RemoteFiles
from fedhpc.adapters.site_view import BILLING_EVERY_S, SiteView
from fedhpc.adapters.submit_batch import (
    MKDIR_FAILED,
    SubmitEntry,
    SubmittedJob,
    split_submissions,
    submissions_command,
)
from fedhpc.adapters.transports import make_transport
from fedhpc.adapters.transports.base import (
    LineTransport,
    Transport,
    TransportError,
    TransportUnavailable,
    UnusableTransport,
)
from fedhpc.domain.config import Site
from fedhpc.domain.job import AccountingRecord, JobObservation, JobSpec
from fedhpc.errors import FedError, UsageError
from fedhpc.settings import COMMAND_TIMEOUT_S, fedhpc_home

__all__ = [
    "CommandFailed",
    "SiteAdapter",
    "StorageUnread",
    "SubmittedJob",
    "WorkdirFailed",
    "open_adapter",
]

log = structlog.get_logger(__name__)


# Calls that go ahead of queued submissions under the site's cap: the daemon's look at its
# own jobs (a job's end is seen on time during a sweep's submission) and cancels.
_URGENT = frozenset({"status", "accounting", "find", "cancel", "ping"})
OBSERVE_BACKOFF_MAX_S = 120.0  # the longest wait after busy answers (a center's squeue pace)


def _utcnow() -> datetime:
    return datetime.now(UTC)


COMMAND_TIMEOUT = float(str(COMMAND_TIMEOUT_S.default))  # the daemon passes its setting
_LINES_AT_ONCE = 1000  # a whole answer handed on as lines (`read_lines` without streaming)


class SiteAdapter(SiteView, RemoteFiles):
    """Profile x dialect x transport for one site. Stateless apart from the transport."""

    def __init__(
        self,
        site: Site,
        transport: Transport,
        *,
        dialect: Dialect | None = None,
        clock: Callable[[], datetime] = _utcnow,
        command_timeout_s: float = COMMAND_TIMEOUT,
        ping_timeout_s: float = PING_TIMEOUT_S,
    ) -> None:
        self.site = site
        self.transport = transport
        # The deadline of every scheduler command (status, accounting, find, submit, cancel) and
        # of the roots read: each call is bounded (a transport retries a quick failure, never a
        # timeout), so a dead site costs its own work that long at most.
        self.command_timeout_s = command_timeout_s
        self.dialect = dialect or get_dialect(site.profile.dialect)
        self._clock = clock
        # The scheduler's ping, run ahead of the probe and of each observation in the same
        # remote call (`liveness`); `down`: what the last such call found, if the controller
        # did not answer (None once one did).
        self.ping = ping_of(site.profile.dialect)
        self.ping_timeout_s = ping_timeout_s  # the probe's: twice unanswered, the site is lost
        self.down: ControllerDown | None = None
        # An observation's (status, find): half a cycle at most (the cycle sets `suspect_ping_s`)
        self.observe_ping_s = ping_timeout_s
        # Remote calls made, by kind (probe, submit, status, accounting, ...): reported by
        # the daemon (`GET /v1/health`, `fedhpc daemon status`) per site and per control cycle.
        self.calls: Counter[str] = Counter()
        # Submit commands run (sbatch, qsub...): a batched call runs several, an array is one.
        self.submit_commands = 0
        # Every command waits its turn under the site's cap (`max_commands_per_min`).
        self.pace = CommandPace(site.profile.command_cap)
        self._observed = -1e18  # time.monotonic() of the last observation allowed
        self._observe_after = 0.0  # none before this (the scheduler said it was busy)
        self._observe_backoff = 0.0  # the last wait after a busy answer (0: none pending)
        # `$NAME` storage roots as the login shell expands them: read once, with the first
        # probe that succeeds (an empty value means the variable is unset there).
        self.roots: dict[str, str] | None = None
        self._roots_error = "not asked yet"
        self._roots_tried = -1e9  # time.monotonic() of the last read
        # The partitions' billing weights as last read, and when (time.monotonic(); None: to
        # read with the next probe): the probes between two reads carry them (`probe`).
        self.billing_every_s = BILLING_EVERY_S
        self._billing_read: float | None = None
        self._weights: dict[str, tuple[tuple[str, float], ...]] = {}

    @property
    def name(self) -> str:
        return self.site.name

    @property
    def login(self) -> str:
        """The user name the scheduler knows us by."""
        return self.site.user.user or self.site.transport.user or getpass.getuser()

    def observe_due(self) -> bool:
        """Whether the site's jobs may be observed now (the profile's `status_floor` since the
        last time this said yes); a yes counts as an observation. Centers ask for squeue no
        more than every 120-180 s per user, whatever the control interval."""
        now = time.monotonic()
        if now < self._observe_after or now - self._observed < self.site.profile.status_floor:
            return False
        self._observed = now
        return True

    def observe_refused(self) -> float:
        """The scheduler refused an observation as busy (`SchedulerBusy`): the next one waits
        twice as long as the last such wait (2 s, 4 s, ... at most OBSERVE_BACKOFF_MAX_S), so
        a rate-limited scheduler is not asked again each control cycle. The wait, in s."""
        self._observe_backoff = min(OBSERVE_BACKOFF_MAX_S, max(2.0, 2 * self._observe_backoff))
        self._observe_after = time.monotonic() + self._observe_backoff
        return self._observe_backoff

    def observe_answered(self) -> None:
        """An observation was answered: the next busy answer starts the back-off afresh."""
        self._observe_backoff = 0.0

    async def _run(self, command: Command, kind: str) -> CommandResult:
        if kind == "probe":  # (the transport applies the profile's environment itself)
            self.pace.take(command.commands)  # the collector's look: never queued behind work
        else:
            await self.pace.acquire(command.commands, urgent=kind in _URGENT)
        self.calls[kind] += 1
        return await self.transport.run(command)

    def _deadline(self, command: Command) -> Command:
        """`command` bounded by the site's scheduler-command deadline."""
        return replace(command, timeout_s=self.command_timeout_s)

    async def _gated(
        self, command: Command, kind: str, *, ping_s: float | None = None
    ) -> CommandResult:
        """`command` behind the scheduler's ping (given `ping_s`, else `ping_timeout_s`), in one
        remote call (`liveness`): raises `ControllerDown` at once when it does not answer."""
        ping_s = self.ping_timeout_s if ping_s is None else ping_s
        if self.ping is None:
            return await self._run(command, kind)
        result = await self._run(gated(command, self.ping, ping_timeout_s=ping_s), kind)
        dialect = self.site.profile.dialect
        found = down_in(result, self.ping, site=self.name, dialect=dialect, ping_timeout_s=ping_s)
        self.down = found if isinstance(found, ControllerDown) else None
        if found is not None:
            log.warning("controller did not answer its ping", site=self.name, error=found.message)
            raise found
        return result

    async def read_lines(
        self, command: Command, kind: str, on_lines: Callable[[list[str]], Awaitable[None]]
    ) -> CommandResult:
        """One remote call (counted under `kind`) whose stdout goes to `on_lines` in lists of
        lines, each awaited before the next: streamed where the transport can (local, ssh:
        never held whole), else read whole first and handed on the same way (Globus Compute).
        Not retried (`LineTransport`); the result's stdout is empty."""
        await self.pace.acquire(command.commands, urgent=kind in _URGENT)
        self.calls[kind] += 1
        if isinstance(self.transport, LineTransport):
            return await self.transport.run_lines(command, on_lines)
        result = await self.transport.run(command)
        lines = iter_lines(result.stdout)
        while chunk := list(islice(lines, _LINES_AT_ONCE)):
            await on_lines(chunk)
        return replace(result, stdout="")

    def render(self, spec: JobSpec) -> str:
        """The batch script for `spec` on this site (pure; shown to users for audit)."""
        try:
            self.site.profile.partition(spec.partition)
        except KeyError as exc:
            raise UsageError(str(exc.args[0]), hint="Pick a partition from the profile.") from None
        return self.dialect.render_script(spec, self.site.profile)

    async def submit(self, spec: JobSpec, *, ensure_dirs: Sequence[str] = ()) -> SubmittedJob:
        """Submit one job; returns once the scheduler accepted it. `ensure_dirs` are created
        first in the same remote call (the job's working and output folders)."""
        (got,) = await self.submit_many([(spec, ensure_dirs)])
        if got is None:
            raise TransportError(f"no answer for {spec.name} from {self.name}'s submission")
        if isinstance(got, FedError):
            raise got
        return got

    async def submit_many(
        self, jobs: Sequence[tuple[JobSpec, Sequence[str]] | ArrayJob]
    ) -> list[SubmittedJob | FedError | None]:
        """`_submit_many`; at a per-person site, once per person, as that person."""
        if getattr(self.transport, "per_person", False):
            return await submit_by_person(self._submit_many, jobs)
        return await self._submit_many(jobs)

    async def _submit_many(
        self, jobs: Sequence[tuple[JobSpec, Sequence[str]] | ArrayJob]
    ) -> list[SubmittedJob | FedError | None]:
        """Submit jobs in ONE remote call (`submit_batch`), each with the folders to make
        first; an `ArrayJob` is one scheduler command for all its members. Per job (an array's
        members each in turn), in order: its job; why there is none (`SchedulerRejected`,
        `WorkdirFailed`, a script that cannot be rendered); or None when its answer did not
        arrive (whether it was submitted is unknown: resolved by name). A single job goes the
        same way: a call cut short (the daemon killed while writing it) submits nothing, where
        a scheduler reading a script from stdin would take the cut script for the whole one.
        A transport failure raises `TransportError`: nothing is known."""
        sizes = [len(j.members) if isinstance(j, ArrayJob) else 1 for j in jobs]
        starts = [sum(sizes[:k]) for k in range(len(jobs))]
        out: list[SubmittedJob | FedError | None] = [None] * sum(sizes)
        todo: list[tuple[int, JobSpec | ArrayJob, str, SubmitEntry]] = []
        for k, job in enumerate(jobs):
            try:
                script, dirs = self._script(job)
            except UsageError as exc:  # this job's own: never its batch-mates'
                out[starts[k] : starts[k] + sizes[k]] = [exc] * sizes[k]
                continue
            todo.append(
                (
                    k,
                    job if isinstance(job, ArrayJob) else job[0],
                    script,
                    SubmitEntry(self.dialect.submit_command(script), dirs),
                )
            )
        if not todo:
            return out
        # The deadline grows with the batch: each entry is one scheduler command at the site.
        timeout_s = self.command_timeout_s * (1 + (len(todo) - 1) / 10)
        command, mark = submissions_command([t[3] for t in todo], timeout_s=timeout_s)
        log.info("submit call", site=self.name, jobs=len(todo), elements=sum(sizes))
        result = await self._run(command, "submit")
        self.submit_commands += len(todo)
        for (k, what, script, _), one in zip(
            todo, split_submissions(result.stdout, len(todo), mark), strict=True
        ):
            if isinstance(what, ArrayJob):
                got = None if one is None else self._submitted(what.members[0], script, one)
                out[starts[k] : starts[k] + sizes[k]] = self._elements(what, got)
            else:
                out[starts[k]] = None if one is None else self._submitted(what, script, one)
        return out

    def _script(self, job: tuple[JobSpec, Sequence[str]] | ArrayJob) -> tuple[str, Sequence[str]]:
        """The script to submit for a job or an array, and the folders to make first."""
        if not isinstance(job, ArrayJob):
            return self.render(job[0]), job[1]
        dialect = array_dialect(self.dialect)
        if dialect is None:
            raise UsageError(f"{self.name}'s scheduler runs no job arrays")
        for spec in job.members:
            self.render(spec)  # each member's partition, directives and argv checked alone
        script = dialect.render_array(
            job.members,
            self.site.profile,
            job.name,
            throttle=job.throttle,
            output_dir=job.output_dir,
        )
        return script, [*job.dirs, job.output_dir]

    def _elements(
        self, job: ArrayJob, got: SubmittedJob | FedError | None
    ) -> list[SubmittedJob | FedError | None]:
        """An array's answer as one job per member: element i's id (`element_id`), or the
        array's refusal (or lost answer) for every member."""
        dialect = array_dialect(self.dialect)
        if not isinstance(got, SubmittedJob) or dialect is None:
            return [got] * len(job.members)
        return [
            SubmittedJob(self.name, dialect.element_id(got.job_id, i), got.script)
            for i in range(len(job.members))
        ]

    def _submitted(
        self, spec: JobSpec, script: str, result: CommandResult
    ) -> SubmittedJob | SchedulerRejected | WorkdirFailed:
        """One job's answer (alone, or its part of a batched call's): its job, or why none."""
        if result.returncode == MKDIR_FAILED and "mkdir" in result.stderr:
            why = result.stderr.strip().splitlines()[-1][:300]
            return WorkdirFailed(f"{WorkdirFailed.PREFIX} on {self.name}: {why}")
        try:
            job_id = self.dialect.parse_submit(result)
        except SchedulerRejected as exc:
            return exc
        log.info("submitted", site=self.name, job_id=job_id, name=spec.name)
        return SubmittedJob(self.name, job_id, script)

    def parent_id(self, job_id: str) -> str:
        """The array an element's id belongs to (any other job's id unchanged)."""
        dialect = array_dialect(self.dialect)
        return job_id if dialect is None else dialect.parent_id(job_id)

    def array_outputs(self, output_dir: str, element_id: str) -> tuple[str, str] | None:
        """The files the scheduler wrote for array element `element_id` (None: no element)."""
        dialect = array_dialect(self.dialect)
        if dialect is None or dialect.parent_id(element_id) == element_id:
            return None
        return dialect.array_outputs(output_dir, element_id)

    def element_id(self, job_id: str, index: int) -> str:
        """Element `index` of the array `job_id`."""
        dialect = array_dialect(self.dialect)
        if dialect is None:
            raise UsageError(f"{self.name}'s scheduler runs no job arrays")
        return dialect.element_id(job_id, index)

    async def status(self, job_ids: Sequence[str]) -> list[JobObservation]:
        if not job_ids:
            return []
        command = self._deadline(self.dialect.status_command(job_ids))
        result = await self._gated(command, "status", ping_s=self.observe_ping_s)
        return self.dialect.parse_status(result)

    async def accounting(self, job_ids: Sequence[str]) -> list[AccountingRecord]:
        if not job_ids:
            return []
        command = self._deadline(self.dialect.accounting_command(job_ids))
        if self.site.profile.dialect in ACCOUNTING_ASKS_CONTROLLER:
            result = await self._gated(command, "accounting", ping_s=self.observe_ping_s)
        else:
            result = await self._run(command, "accounting")
        return self.dialect.parse_accounting(result, now=self._clock())

    async def cancel(self, job_ids: Sequence[str]) -> None:
        if not job_ids:
            return
        if self.down is not None:  # its last ping went unanswered: not held 30 s by a hung
            raise self.down  # controller; the cancel stays owed until the site answers
        result = await self._run(self._deadline(self.dialect.cancel_command(job_ids)), "cancel")
        if not result.ok:
            raise CommandFailed(f"cancel on {self.name} failed: {result.stderr.strip()}")

    async def find(self, names: Sequence[str]) -> dict[str, str]:
        """Job ids of our jobs by name (after a crash lost the id); absent names are unknown."""
        if not names:
            return {}
        command = self._deadline(self.dialect.find_command(names))
        found = await self._gated(command, "find", ping_s=self.observe_ping_s)
        return self.dialect.parse_find(found)


def open_adapter(
    site: Site,
    *,
    command_timeout_s: float = COMMAND_TIMEOUT,
    ping_timeout_s: float = PING_TIMEOUT_S,
) -> SiteAdapter:
    """The adapter for `site`, with the transport its profile and the user's config name;
    its scheduler commands are abandoned after `command_timeout_s`, its pings after
    `ping_timeout_s`."""

    transport: Transport
    try:
        transport = make_transport(
            site.transport,
            state_dir=fedhpc_home(),
            name=site.name,
            per_person=site.user.identity == "person",
        )
    except TransportUnavailable as exc:  # raised by its first call, so other sites still work
        transport = UnusableTransport(exc, name=site.name)
    return SiteAdapter(
        site, transport, command_timeout_s=command_timeout_s, ping_timeout_s=ping_timeout_s
    )
