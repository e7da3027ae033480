"""The task tools' handlers: get_result (its manifest: `task_result.py`), cancel, replan and
task listing (the agent's and people's view of tasks)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime

import anyio
import structlog

from fedhpc.adapters.site import SiteAdapter
from fedhpc.collector import Collector
from fedhpc.domain.envelope import ResourceEnvelope
from fedhpc.domain.job import JobState
from fedhpc.errors import UsageError
from fedhpc.globus_auth.people import acting_for
from fedhpc.ops.hints import next_hint
from fedhpc.ops.task_views import ResultManifest, TaskHandle, TaskSummary
from fedhpc.ops.tasks import CancelRequest, ReplanRequest, ResultRequest
from fedhpc.orchestrator import staging
from fedhpc.orchestrator.accept import PLACE_WAIT_S
from fedhpc.orchestrator.adapt import Adaptation
from fedhpc.orchestrator.book import TaskBook, TaskNotFound, handle
from fedhpc.orchestrator.dispatch import Dispatcher, Intent
from fedhpc.orchestrator.door import check_envelope
from fedhpc.orchestrator.group_cancel import cancel_group, group_named
from fedhpc.orchestrator.liveness import online
from fedhpc.orchestrator.offline_wait import offline_sites
from fedhpc.orchestrator.planner import Planner, provenance
from fedhpc.orchestrator.records import AttemptRecord, TaskRecord
from fedhpc.orchestrator.replan_checks import (
    check_exclusions,
    started_refusal,
    what_scheduler_says,
    would_wait_refusal,
)
from fedhpc.orchestrator.task_result import current_attempt, result_manifest
from fedhpc.placement import Placement
from fedhpc.placement.normalize import merge_envelope
from fedhpc.transfer import records as transfers

__all__ = ["TaskTools"]


log = structlog.get_logger(__name__)


class TaskTools:
    """get_result, list_tasks, cancel and replan on the task book; cancel and replan hold
    `lock` (no control cycle or placement meanwhile)."""

    def __init__(
        self,
        book: TaskBook,
        collector: Collector,
        adapters: Mapping[str, SiteAdapter],
        planner: Planner,
        *,
        dispatcher: Dispatcher,
        adaptation: Adaptation,
        lock: anyio.Lock,
        clock: Callable[[], datetime],
        wake_placer: Callable[[], None],
        wait_placed: Callable[[list[str], float], Awaitable[None]],
        place_wait_s: float = PLACE_WAIT_S,
    ) -> None:
        self.book = book
        self.collector = collector
        self.adapters = adapters
        self.planner = planner
        self.dispatcher = dispatcher
        self.adaptation = adaptation
        self.lock = lock
        self.clock = clock
        self.wake_placer = wake_placer
        self.wait_placed = wait_placed
        self.place_wait_s = place_wait_s

    async def _load(self, task_id: str) -> TaskRecord:
        """The task; an id that names a group or a transfer says so and where to read it (a
        careless agent passes the id it has: "no task" and `fedhpc tasks` would not help)."""
        try:
            return await self.book.load_task(task_id)
        except TaskNotFound:
            if await self.book.store.get_group(task_id) is not None:
                raise TaskNotFound(
                    f"{task_id!r} is a group, not a task",
                    hint=f"Read resource fedhpc://groups/{task_id}: get_result and replan take "
                    "the task_id of one of its children (cancel takes the group's id too: "
                    "every child still live is cancelled).",
                ) from None
            async with self.book.store.transaction() as tx:
                transfer = await transfers.get(tx, task_id)
            if transfer is not None:
                raise TaskNotFound(
                    f"{task_id!r} is a transfer, not a task",
                    hint=f"Read resource fedhpc://transfers/{task_id}; pass it to a task in "
                    "submit_task's stage_in.",
                ) from None
            raise

    async def _refuse_if_started(self, task: TaskRecord, live: list[AttemptRecord]) -> None:
        """Refuse when the scheduler says a job has started: the stored state is the last
        probe's, and a job started since would be killed (or one that ended, run again) by a
        replan that promises no work is lost. Anything but pending counts, and so does a job
        missing from the answer (it left the queue). A site that does not answer keeps the
        stored state (its cancel waits for it anyway)."""
        for a in live:
            if a.job_id is None or not online(self.collector, a.site):
                continue
            try:
                with acting_for(task.owner):  # a per-person site asks as the task's person
                    seen = await self.adapters[a.site].status([a.job_id])
            except Exception as exc:  # any transport failure: keep the stored state
                log.info("replan status check failed", site=a.site, error=str(exc)[:200])
                continue
            said = what_scheduler_says(a.job_id, seen)
            if said is not None:
                raise started_refusal(task.id, a.site, a.job_id, said)

    async def get_result(self, req: ResultRequest) -> ResultManifest:
        """The manifest: state, attempts, provenance, output references with sizes, and bounded
        tails of its output (orchestrator/task_result.py)."""
        task = await self._load(req.task_id)
        return await result_manifest(
            task, req, book=self.book, collector=self.collector, adapters=self.adapters
        )

    async def list_tasks(
        self, *, state: str | None = None, limit: int = 100, owner: str | None = None
    ) -> list[TaskSummary]:
        """Newest first; each task's current attempt as get_result picks it; `owner`'s only
        when given (service mode)."""
        rows = await self.book.store.task_listing(state=state, limit=limit, owner=owner)
        return [TaskSummary.from_row(row) for row in rows]

    async def cancel(self, req: CancelRequest) -> TaskHandle:
        """Cancel every live attempt; the task ends cancelled, with a `task.cancelled` event that
        wakes nobody (the caller asked) but tells every stream following the task that it ended.
        A task that had already ended stays as it was, and the answer says nothing was cancelled."""
        async with self.lock:
            if (group := await group_named(self.book.store, req.task_id)) is not None:
                out, live = await cancel_group(
                    self.book, self.adaptation, req.task_id, group, clock=self.clock
                )
            else:
                out, live = await self._cancel(req.task_id)
        # The scheduler's cancels go after the lock (`cancels.send`): a slow or rate-limited
        # site delays this answer, never another session's work.
        await self.adaptation.cancels.send(live)
        return _unconfirmed(out, live)

    async def _cancel(self, task_id: str) -> tuple[TaskHandle, list[AttemptRecord]]:
        """Under the lock: the task ends cancelled, its live attempts owing their cancels."""
        task = await self._load(task_id)
        atts = await self.book.load_attempts(task.id)
        if task.state.terminal:
            hint = next_hint("cancel", task.state.value, resumes=False, ref=task.id)
            return handle(task, current_attempt(atts, task)).model_copy(update={"next": hint}), []
        live = [a for a in atts if not a.state.terminal]
        for a in live:
            self.adaptation.cancels.owe(a)
            a.superseded = True
        task.state, task.reasons = JobState.CANCELLED, ("cancelled on request",)
        async with self.book.store.transaction() as tx:
            await self.book.save(tx, task, *live, at=self.clock())
            await self.book.emit(tx, "task.cancelled", task, reason=task.reasons[0])
        hint = next_hint("cancel", task.state.value, resumes=False, cancelled_now=True)
        return handle(task, current_attempt(atts, task)).model_copy(update={"next": hint}), live

    async def replan(self, req: ReplanRequest) -> TaskHandle:
        """Re-place a task that has not started, or send an unschedulable one back to placement:
        new exclusions and/or envelope fields (merged over the task's: merge_envelope). Refused,
        with nothing saved, when no site could run it. The answer's decision says which
        envelope fields changed."""
        out = await self._replan(req)
        if req.envelope is None:
            return out
        given = sorted(req.envelope.model_fields_set)
        said = (
            f"envelope: {', '.join(given)} replaced; the rest kept from the task"
            if given
            else "envelope: nothing given, the task's kept"
        )
        return out.model_copy(update={"decision": f"{out.decision}; {said}".lstrip("; ")})

    async def _replan(self, req: ReplanRequest) -> TaskHandle:
        intent: Intent | None = None
        async with self.lock:
            task = await self._load(req.task_id)
            atts = await self.book.load_attempts(task.id)
            live = [a for a in atts if not a.state.terminal and not a.superseded]
            reopen = task.state is JobState.UNSCHEDULABLE
            if reopen:
                await self._reopenable(task)
            elif task.state.terminal:
                raise UsageError(
                    f"task {task.id} is already {task.state.value}",
                    hint="Submit a new task instead.",
                )
            if any(a.state is JobState.RUNNING for a in live):
                raise UsageError(f"task {task.id} is running", hint="Cancel it, then submit again.")
            # Every local check before the scheduler is asked (under the lock that holds up the
            # control cycle): a request bound to be refused never waits for a remote call.
            envelope = task.request.envelope
            if req.envelope is not None:  # the fields given replace the task's; others stay
                envelope = merge_envelope(envelope, req.envelope)
                check_envelope(envelope, self.collector.sites)
            pending = staging.waiting(task)
            await self._check_sites(task, req, envelope, pending=pending)
            await self._refuse_if_started(task, live)
            task.excluded_sites = tuple(sorted(set(task.excluded_sites) | set(req.exclude_sites)))
            task.refused_sites = ()  # the agent asked again: a site that refused it may not now
            if req.envelope is not None:
                task.request = task.request.model_copy(update={"envelope": envelope})
            decision = await self.planner.decide(task)
            # Only offline sites could run it: it waits for them in fedhpc, as a new task would
            # (never when a job of it waits at a scheduler: that job is not given up for a wait,
            # and the refusal says so).
            down = (
                [] if isinstance(decision, Placement) else offline_sites(self.collector, decision)
            )
            if live and down:
                raise would_wait_refusal(task.id, live, down)
            waits = not isinstance(decision, Placement) and not live
            if not isinstance(decision, Placement) and not (waits and down):
                raise UsageError(
                    f"no feasible placement: {decision.hint}",
                    hint="Relax the envelope (draft_envelope helps); the task's excluded "
                    "sites stay excluded. The task is unchanged.",
                )
            if pending:
                # Its input has not arrived: only the envelope and exclusions change now; staging
                # queues it for placement (with them) when the copy succeeded.
                task.decision = (
                    f"waiting for stage-in {', '.join(task.request.stage_in)}; "
                    "replanned: placed when its input arrives"
                )
                async with self.book.store.transaction() as tx:
                    await self.book.save(tx, task, at=self.clock())
                return handle(task, None)
            if reopen or waits:
                # Back into placement like a new submission: the placer dispatches it (with its
                # scheduler-refusal retries), or holds it for its offline sites, and its next
                # outcome is a new event.
                task.reopened += 1 if reopen else 0
                task.state, task.reasons = JobState.QUEUED, ()
                task.decision = "queued: replanned, placed next"
                async with self.book.store.transaction() as tx:
                    await self.book.save(tx, task, at=self.clock())
                self.wake_placer()
            else:
                assert isinstance(decision, Placement)
                prepared = await self._move(task, live, decision)
                if isinstance(prepared, AttemptRecord):
                    return handle(task, prepared)  # failed before any folder or job existed
                intent = prepared
        if intent is not None:  # submitted without the lock: a slow site holds up nothing else
            return await self._send_moved(task, live, intent)
        # answer with the placement when it is quick
        await self.wait_placed([task.id], self.place_wait_s)
        task = await self.book.load_task(task.id)
        atts = [a for a in await self.book.load_attempts(task.id) if not a.superseded]
        return handle(task, atts[-1] if atts else None)

    async def _send_moved(
        self, task: TaskRecord, replaced: list[AttemptRecord], intent: Intent
    ) -> TaskHandle:
        """Without the lock: the replaced jobs cancelled, then the new attempt submitted."""
        await self.adaptation.cancels.send(replaced)
        return handle(task, await self.dispatcher.complete(intent))

    async def _move(
        self, task: TaskRecord, live: list[AttemptRecord], decision: Placement
    ) -> Intent | AttemptRecord:
        """Under the lock: the live attempts superseded (cancelled where their site answers)
        and the new attempt's intent written; `Dispatcher.complete` submits it."""
        for a in live:
            a.superseded, a.reason = True, "replanned on request"
            self.adaptation.cancels.owe(a)  # sent after the lock (`cancels.send`)
        task.provenance = provenance(task.request.envelope, decision)
        async with self.book.store.transaction() as tx:
            await self.book.save(tx, task, *live, at=self.clock())
        return await self.dispatcher.prepare(task, decision)

    async def _check_sites(
        self, task: TaskRecord, req: ReplanRequest, envelope: ResourceEnvelope, *, pending: bool
    ) -> None:
        """Refuse exclusions and includes that would run the task where it must not: where the
        caller or an earlier exclusion said not to, or away from the one site its inputs
        arrive at (the transfer's destination, read for a task stored before `data_site`),
        including a site added to the federation since submission, which nothing excludes."""
        site = task.data_site
        if site is None and task.request.stage_in:
            site = await staging.arrival_site(self.book.store, task)
        if pending and site is not None:
            if site in req.exclude_sites:
                raise staging.StageInPending(task, site)
            staging.check_envelope(site, envelope)
        check_exclusions(task, req.exclude_sites, envelope)
        if site is not None:
            staging.check_staged(task, site, req.exclude_sites, envelope)

    async def _reopenable(self, task: TaskRecord) -> None:
        """An unschedulable group child re-enters placement only while its round is open."""
        if task.group_id is None:
            return
        group = await self.book.store.get_group(task.group_id)
        if group is not None and group["state"] != "running":
            raise UsageError(
                f"task {task.id} belongs to group {task.group_id}, whose round already ended",
                hint="Submit the group again with submit_group and a changed envelope.",
            )


def _unconfirmed(out: TaskHandle, live: list[AttemptRecord]) -> TaskHandle:
    """A cancel's answer that says which jobs no scheduler has taken the cancel of yet (the
    site offline or refusing, or the submission still in flight): still owed, sent when the
    site answers; never "stopped" when it is not known to be."""
    owed = [a for a in live if a.cancel_pending]
    if not owed:
        return out
    jobs = [
        f"job {a.job_id} at {a.site}" if a.job_id else f"a submission to {a.site} in flight"
        for a in owed[:5]
    ]
    more = f" and {len(owed) - 5} more" if len(owed) > 5 else ""
    note = (
        f"no scheduler has confirmed the cancel of {', '.join(jobs)}{more} yet: fedhpc "
        "cancels each when its site answers; nothing is needed from you"
    )
    decision = f"{out.decision}; {note}" if out.decision else note
    after = (
        "Cancelled: it ends here and nothing will wake you for it; the jobs decision names are "
        "cancelled at their schedulers when those answer (fedhpc does it)."
    )
    return out.model_copy(update={"decision": decision, "next": after})
