"""A refused submission's fallback: a scheduler that refuses a candidate the rules accepted
sends the task to the next feasible site (three tries in all; an array's member first alone
to the same site); back to the queue when only offline sites are left; else the task fails
with every site's reason. Each refusal is weighed under the orchestrator's lock, on the task
as stored then."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime

import anyio
import structlog

from fedhpc.adapters.site import StorageUnread, WorkdirFailed
from fedhpc.collector import Collector
from fedhpc.domain.job import JobState
from fedhpc.errors import typed_error
from fedhpc.ops.task_views import TaskHandle
from fedhpc.orchestrator.book import TaskBook
from fedhpc.orchestrator.dispatch import LOGIN_REQUIRED, Dispatcher, Intent
from fedhpc.orchestrator.hedging import set_aside
from fedhpc.orchestrator.offline_wait import offline_sites
from fedhpc.orchestrator.planner import Planner
from fedhpc.orchestrator.records import AttemptRecord, TaskRecord
from fedhpc.placement import Placement, Unschedulable
from fedhpc.placement.estimators import WaitHistory

__all__ = ["Fallback", "moved_on"]

log = structlog.get_logger(__name__)


@dataclass
class _Tries:
    """One task's submissions so far: the sites that refused or could not take it, and why."""

    rejected: list[str] = field(default_factory=list)  # not to be tried again in this dispatch
    refused: list[str] = field(default_factory=list)  # refused by their scheduler: never again
    reason: str = ""
    login: str = ""


class Fallback:
    """`submit` one task (its lane's first try given, or made here) and its fallbacks; `fail`
    records a task whose submission raised."""

    def __init__(
        self,
        book: TaskBook,
        planner: Planner,
        dispatcher: Dispatcher,
        collector: Collector,
        *,
        lock: anyio.Lock,
        clock: Callable[[], datetime],
        unschedulable: Callable[[TaskRecord, Unschedulable], Awaitable[TaskHandle]],
        limiter: Callable[[str], anyio.CapacityLimiter],
    ) -> None:
        self.book = book
        self.planner = planner
        self.dispatcher = dispatcher
        self.collector = collector
        self.lock = lock
        self.clock = clock
        self.unschedulable = unschedulable
        self._limiter = limiter  # the submitter's: submit calls in flight per site

    async def fail(self, task: TaskRecord, p: Placement, exc: Exception) -> None:
        """Under the lock: the task, as stored now, fails with the reason (unless it ended)."""
        typed = typed_error(exc)  # itself, or the typed error inside a task group
        if typed is None:
            log.exception("dispatch failed", task=task.id, site=p.site)
        message = typed.message if typed else f"internal: {type(exc).__name__}"
        task = await self.book.load_task(task.id)
        if task.state.terminal:
            return
        task.state = JobState.FAILED
        task.reasons = (f"could not submit to {p.site}: {message}",)
        async with self.book.store.transaction() as tx:
            await self.book.save(tx, task, at=self.clock())
            await self.book.emit(tx, "task.retry_exhausted", task, reason=task.reasons[0])

    async def submit(
        self,
        task: TaskRecord,
        p: Placement,
        prepared: Intent | AttemptRecord,
        history: WaitHistory | None,
        first: AttemptRecord | None = None,
    ) -> None:
        """Submit (unless `first`, the first try's attempt, is given); a scheduler that refuses
        a candidate the rules accepted sends the task to the next feasible site (three tries in
        all). Each refusal is weighed under the lock, on the task as stored then: one cancelled
        or re-placed meanwhile is left as it is."""
        tries = _Tries()
        solo = False  # an array's member refused with its array: tried once alone, here
        for k in range(4):
            if first is not None:
                att, first = first, None
            elif isinstance(prepared, Intent):
                async with self._limiter(p.site):
                    att = await self.dispatcher.complete(prepared)
            else:
                att = prepared  # failed before any folder or job existed
            if att.state is not JobState.FAILED:
                return
            async with self.lock:
                task = await self.book.load_task(task.id)
                atts = await self.book.load_attempts(task.id)
                mine = next((x for x in atts if x.n == att.n), att)
                if task.state.terminal or mine.superseded or moved_on(atts, att):
                    return  # cancelled, replanned or moved meanwhile: not this submission's
                if await set_aside(self.book, task, mine, f"not submitted to {att.site}"):
                    return  # a hedged copy of it goes on elsewhere
                if att.array_name is not None and not solo:
                    # The array's refusal (its script's size, MaxArraySize, a limit counting
                    # elements, one member's folder) says nothing of this job alone: it goes
                    # alone to the same site before the site counts as refusing it.
                    solo = True
                    log.warning(
                        "array refused: its member goes alone",
                        task=task.id,
                        site=att.site,
                        reason=att.reason,
                    )
                    prepared = await self.dispatcher.prepare(task, p)
                    continue
                step = await self._refused(task, att, tries, history)
                if step is True:
                    return
                if step is False or k == 2 + solo:
                    await self._give_up(task, tries)
                    return
                p = step
                prepared = await self.dispatcher.prepare(task, p)

    async def _refused(
        self, task: TaskRecord, att: AttemptRecord, tries: _Tries, history: WaitHistory | None
    ) -> Placement | bool:
        """After a failed submission: the next placement to try; True when the task was settled
        here (back to the queue, or unschedulable); False when it fails (`_give_up`)."""
        tries.reason = reason = att.reason or ""
        if reason.startswith(WorkdirFailed.PREFIX):
            tries.rejected = [att.site]  # the job's folder: one clear failure, not a retry
            return False
        tries.rejected.append(att.site)  # refused, or its storage unread: the next feasible site
        if reason.startswith(LOGIN_REQUIRED):
            tries.login = reason  # the person's move: they are asked, it is never waited out
        elif not reason.startswith(StorageUnread.PREFIX):  # a refusal: again next time too
            tries.refused.append(att.site)
        log.warning("not submitted", task=task.id, site=att.site, reason=att.reason)
        decision = await self.planner.decide(task, exclude=tuple(tries.rejected), history=history)
        if tries.login and isinstance(decision, Unschedulable):
            tries.reason = tries.login  # the task fails with the login command, whoever is offline
            return False
        if isinstance(decision, Unschedulable) and offline_sites(self.collector, decision):
            await self._requeue(task, tries.refused, reason)  # the placer holds it for them
            return True
        if isinstance(decision, Unschedulable):
            await self.unschedulable(task, decision)
            return True
        return decision

    async def _give_up(self, task: TaskRecord, tries: _Tries) -> None:
        reason, rejected = tries.reason, tries.rejected
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


def moved_on(atts: list[AttemptRecord], att: AttemptRecord) -> bool:
    """Whether the task has an attempt newer than `att` that is not a hedged copy alongside it
    (a replan's, a re-placement's, or another copy's fallback): `att` is no longer its own."""
    root = att.copy_of or att.n
    return any(x.n > att.n and (x.copy_of or x.n) != root for x in atts)
