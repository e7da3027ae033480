"""A placed task's submission, with fallback: a scheduler that refuses a candidate the rules
accepted sends the task to the next feasible site (three tries in all; back to the queue when
only offline sites are left), at most `PER_SITE`
submissions in flight per site; a failure of the task's own never cancels its batch-mates."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime

import anyio
import structlog

from fedhpc.adapters.site import StorageUnread, WorkdirFailed
from fedhpc.collector import Collector
from fedhpc.domain.job import JobState
from fedhpc.errors import typed_error
from fedhpc.ops.task_views import TaskHandle
from fedhpc.orchestrator.book import TaskBook
from fedhpc.orchestrator.dispatch import LOGIN_REQUIRED, Dispatcher
from fedhpc.orchestrator.offline_wait import offline_sites
from fedhpc.orchestrator.planner import Planner
from fedhpc.orchestrator.records import TaskRecord
from fedhpc.placement import Placement, Unschedulable
from fedhpc.placement.estimators import WaitHistory

__all__ = ["PER_SITE", "Submitter"]

log = structlog.get_logger(__name__)

PER_SITE = 2  # scheduler submissions in flight per site


class Submitter:
    """Hands placed tasks to their schedulers (`dispatch`), the next feasible site when one
    refuses; `unschedulable` records a task no site is left for."""

    def __init__(
        self,
        book: TaskBook,
        planner: Planner,
        dispatcher: Dispatcher,
        collector: Collector,
        *,
        clock: Callable[[], datetime],
        unschedulable: Callable[[TaskRecord, Unschedulable], Awaitable[TaskHandle]],
    ) -> None:
        self.book = book
        self.planner = planner
        self.dispatcher = dispatcher
        self.collector = collector
        self.clock = clock
        self.unschedulable = unschedulable
        self.limits: dict[str, anyio.CapacityLimiter] = {}

    def _limiter(self, site: str) -> anyio.CapacityLimiter:
        limiter = self.limits.get(site)
        if limiter is None:
            limiter = self.limits[site] = anyio.CapacityLimiter(PER_SITE)
        return limiter

    async def dispatch(self, task: TaskRecord, p: Placement, history: WaitHistory | None) -> None:
        """One task's submission; a failure of its own never cancels its batch-mates (they run in
        one task group) nor blocks the queue behind it: the task fails with the reason."""
        try:
            await self._submit(task, p, history)
        except Exception as exc:  # typed or not: this task's failure, never the batch's
            typed = typed_error(exc)  # itself, or the typed error inside a task group
            if typed is None:
                log.exception("dispatch failed", task=task.id, site=p.site)
            message = typed.message if typed else f"internal: {type(exc).__name__}"
            task.state = JobState.FAILED
            task.reasons = (f"could not submit to {p.site}: {message}",)
            async with self.book.store.transaction() as tx:
                await self.book.save(tx, task, at=self.clock())
                await self.book.emit(tx, "task.retry_exhausted", task, reason=task.reasons[0])

    async def _submit(self, task: TaskRecord, p: Placement, history: WaitHistory | None) -> None:
        """Submit; a scheduler that refuses a candidate the rules accepted sends the task to the
        next feasible site (three tries in all)."""
        rejected: list[str] = []
        refused: list[str] = []
        reason = login = ""
        for _ in range(3):
            async with self._limiter(p.site):
                att = await self.dispatcher.dispatch(task, p)
            if att.state is not JobState.FAILED:
                return
            reason = att.reason or ""
            if reason.startswith(WorkdirFailed.PREFIX):
                rejected = [att.site]  # the job's folder: one clear failure, not a retry
                break
            rejected.append(att.site)  # refused, or its storage unread: the next feasible site
            if reason.startswith(LOGIN_REQUIRED):
                login = reason  # the person's move: they are asked, it is never waited out
            elif not reason.startswith(StorageUnread.PREFIX):  # a refusal: again next time too
                refused.append(att.site)
            log.warning("not submitted", task=task.id, site=att.site, reason=att.reason)
            decision = await self.planner.decide(task, exclude=tuple(rejected), history=history)
            if login and isinstance(decision, Unschedulable):
                reason = login  # the task fails with the login command, whoever is offline
                break
            if isinstance(decision, Unschedulable) and offline_sites(self.collector, decision):
                await self._requeue(task, refused, reason)  # the placer holds it for them
                return
            if isinstance(decision, Unschedulable):
                await self.unschedulable(task, decision)
                return
            p = decision
        task.state = JobState.FAILED
        if reason.startswith(WorkdirFailed.PREFIX):
            task.reasons = (reason,)  # the job's folder, not the scheduler
        elif reason.startswith(StorageUnread.PREFIX):  # no scheduler saw it either
            task.reasons = (f"not submitted to {', '.join(rejected)}: {reason}",)
        else:
            last = f": {reason}" if reason else ""
            task.reasons = (f"rejected by the schedulers of {', '.join(rejected)}{last}",)
        async with self.book.store.transaction() as tx:
            await self.book.save(tx, task, at=self.clock())
            await self.book.emit(tx, "task.retry_exhausted", task, reason=task.reasons[0])

    async def _requeue(self, task: TaskRecord, refused: list[str], reason: str) -> None:
        """Refused where it was placed, and only offline sites are left: back to the queue, as
        any task that waits for them (`offline_wait`), never again to the sites that refused
        it (`refused_sites`); the placer decides and holds it."""
        task.refused_sites = tuple(sorted({*task.refused_sites, *refused}))
        task.state = JobState.QUEUED
        task.decision = f"queued: not submitted ({reason[:200]}); placed again next"
        async with self.book.store.transaction() as tx:
            await self.book.save(tx, task, at=self.clock())
