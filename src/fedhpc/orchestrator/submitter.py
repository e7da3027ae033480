"""A placed task's submission, with fallback: a scheduler that refuses a candidate the rules
accepted sends the task to the next feasible site (three tries in all; back to the queue when
only offline sites are left), at most `PER_SITE`
submissions in flight per site, none of them under the orchestrator's lock; a failure of the
task's own never cancels its batch-mates."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime

import anyio
import structlog
from anyio.abc import TaskGroup

from fedhpc.adapters.site import StorageUnread, WorkdirFailed
from fedhpc.collector import Collector
from fedhpc.domain.job import JobState
from fedhpc.errors import typed_error
from fedhpc.logs import isolated
from fedhpc.ops.task_views import TaskHandle
from fedhpc.orchestrator.book import TaskBook
from fedhpc.orchestrator.dispatch import LOGIN_REQUIRED, Dispatcher, Intent
from fedhpc.orchestrator.offline_wait import offline_sites
from fedhpc.orchestrator.planner import Planner
from fedhpc.orchestrator.records import AttemptRecord, TaskRecord
from fedhpc.placement import Placement, Unschedulable
from fedhpc.placement.estimators import WaitHistory

__all__ = ["PER_SITE", "SEND_WAIT_S", "Submitter"]

log = structlog.get_logger(__name__)

PER_SITE = 2  # scheduler submissions in flight per site
# A placement batch waits this long for its submissions (so an answer usually carries the job
# id), then the next goes on while a slow site's still run.
SEND_WAIT_S = 2.0


@dataclass
class _Tries:
    """One task's submissions so far: the sites that refused or could not take it, and why."""

    rejected: list[str] = field(default_factory=list)  # not to be tried again in this dispatch
    refused: list[str] = field(default_factory=list)  # refused by their scheduler: never again
    reason: str = ""
    login: str = ""


Prepared = tuple[TaskRecord, Placement, Intent | AttemptRecord, WaitHistory | None]


class Submitter:
    """Hands placed tasks to their schedulers, the next feasible site when one refuses:
    `prepare` writes the intents under the orchestrator's `lock`, `send` submits them once the
    lock is released (each takes it again to record its outcome). `unschedulable` records a
    task no site is left for."""

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
    ) -> None:
        self.book = book
        self.planner = planner
        self.dispatcher = dispatcher
        self.collector = collector
        self.lock = lock
        self.clock = clock
        self.unschedulable = unschedulable
        self.limits: dict[str, anyio.CapacityLimiter] = {}
        self.ready: list[Prepared] = []  # intents written by `prepare`, for `send`
        self.background: TaskGroup | None = None  # the placer's, while it runs

    def _limiter(self, site: str) -> anyio.CapacityLimiter:
        limiter = self.limits.get(site)
        if limiter is None:
            limiter = self.limits[site] = anyio.CapacityLimiter(PER_SITE)
        return limiter

    async def prepare(
        self, jobs: list[tuple[TaskRecord, Placement]], history: WaitHistory | None
    ) -> None:
        """Under the lock: each placed task's intent is written (no window in which a decided
        task still reads as queued); `send` submits them. A task whose intent cannot be written
        fails alone."""
        for task, p in jobs:
            try:
                prepared = await self.dispatcher.prepare(task, p)
            except Exception as exc:  # this task's failure, never its batch-mates'
                with isolated("recording a failed dispatch failed", task=task.id):
                    await self._failed(task, p, exc)
                continue
            self.ready.append((task, p, prepared, history))

    async def send(self) -> None:
        """Without the lock: what `prepare` wrote, submitted concurrently (at most `PER_SITE`
        at a time per site), so a slow or dead site's sbatch holds up no other work. In the
        daemon (`background` set) they run in the placer's task group and this returns once
        they are done or after `SEND_WAIT_S`: the next batch never waits for a dead site."""
        ready, self.ready = self.ready, []
        if self.background is None:
            async with anyio.create_task_group() as tg:
                for item in ready:
                    tg.start_soon(self._dispatch, *item, name=f"dispatch:{item[0].id}")
            return
        left = len(ready)
        done = anyio.Event()

        async def one(item: Prepared) -> None:
            nonlocal left
            try:
                await self._dispatch(*item)
            finally:
                left -= 1
                if not left:
                    done.set()

        for item in ready:
            self.background.start_soon(one, item, name=f"dispatch:{item[0].id}")
        if ready:
            with anyio.move_on_after(SEND_WAIT_S):
                await done.wait()

    async def _dispatch(
        self,
        task: TaskRecord,
        p: Placement,
        prepared: Intent | AttemptRecord,
        history: WaitHistory | None,
    ) -> None:
        """One task's submission; a failure of its own never cancels its batch-mates (they run in
        one task group) nor blocks the queue behind it: the task fails with the reason."""
        try:
            await self._submit(task, p, prepared, history)
        except Exception as exc:  # typed or not: this task's failure, never the batch's
            async with self.lock:
                with isolated("recording a failed dispatch failed", task=task.id):
                    await self._failed(task, p, exc)

    async def _failed(self, task: TaskRecord, p: Placement, exc: Exception) -> None:
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

    async def _submit(
        self,
        task: TaskRecord,
        p: Placement,
        prepared: Intent | AttemptRecord,
        history: WaitHistory | None,
    ) -> None:
        """Submit; a scheduler that refuses a candidate the rules accepted sends the task to the
        next feasible site (three tries in all). Each refusal is weighed under the lock, on the
        task as stored then: one cancelled or re-placed meanwhile is left as it is."""
        tries = _Tries()
        for k in range(3):
            if isinstance(prepared, Intent):
                async with self._limiter(p.site):
                    att = await self.dispatcher.complete(prepared)
            else:
                att = prepared  # failed before any folder or job existed
            if att.state is not JobState.FAILED:
                return
            async with self.lock:
                task = await self.book.load_task(task.id)
                if task.state.terminal or task.attempts_made != att.n or att.superseded:
                    return  # cancelled, replanned or moved meanwhile: not this submission's
                step = await self._refused(task, att, tries, history)
                if step is True:
                    return
                if step is False or k == 2:
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
