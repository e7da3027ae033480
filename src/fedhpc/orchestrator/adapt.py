"""Adaptation within each task's budgets: an attempt that ended is accepted, retried or extended,
or ends its task with one event; work on a lost site moves elsewhere; a long-pending attempt
moves when another placement finishes sooner by the task's margin."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import anyio
import structlog

from fedhpc.adapters.site import SiteAdapter
from fedhpc.collector import Collector
from fedhpc.domain.job import ACTIVE, JobState
from fedhpc.logs import isolated
from fedhpc.ops.tasks import AdaptationPolicy
from fedhpc.orchestrator import staging
from fedhpc.orchestrator.book import TaskBook
from fedhpc.orchestrator.cancels import Cancels
from fedhpc.orchestrator.dispatch import Dispatcher
from fedhpc.orchestrator.hedging import Hedger, live_others, place_again, set_aside
from fedhpc.orchestrator.planner import Planner
from fedhpc.orchestrator.records import AttemptRecord, TaskRecord
from fedhpc.placement import Placement
from fedhpc.store import Tx

__all__ = ["ACTIVE_STATES", "Adaptation"]

log = structlog.get_logger(__name__)

ACTIVE_STATES = tuple(sorted(s.value for s in ACTIVE))  # the store's attempt states to watch
_LOST_IDS = 20  # task ids named in one group.site_lost; the group resource lists them all


def _may_move(cheap: dict[str, Any], pending_s: float) -> bool:
    """adapt_pending's budget checks on a task's few fields (Store.pending_budgets), the same
    as on the loaded task: re-placing allowed, budget left, pending long enough. The stored
    policy is parsed by its model, so a field it lacks takes the model's default (about 3 us a
    call: 15 ms a cycle over 5,000 pending attempts)."""
    policy = AdaptationPolicy.model_validate(cheap["adaptation"] or {})
    return (
        policy.replace_pending
        and int(cheap["used"]) < policy.max_replacements
        and pending_s >= policy.replace_after_s
    )


class Adaptation:
    """What fedhpc does on its own about an attempt, within the task's adaptation budget."""

    def __init__(
        self,
        book: TaskBook,
        collector: Collector,
        adapters: Mapping[str, SiteAdapter],
        planner: Planner,
        dispatcher: Dispatcher,
        *,
        clock: Callable[[], datetime],
        site_lost_after_s: float,
        lock: anyio.Lock,
        hedger: Hedger | None = None,
    ) -> None:
        self.book = book
        self.hedger = hedger  # the placer's: a re-placement is hedged as a first placement is
        self.lock = lock  # the orchestrator's: held to record, never to send a cancel
        # Cancels still owed, as `adapt_pending` found them this cycle (`cancels.send` them).
        self.owed: list[AttemptRecord] = []
        self.collector = collector
        self.adapters = adapters
        self.planner = planner
        self.dispatcher = dispatcher
        self.clock = clock
        # A cancel is marked under the lock and sent after it (`Cancels`).
        self.cancels = Cancels(book, collector, adapters, clock=clock, lock=lock)
        # Work on an offline site that fedhpc cannot move wakes the agent after this long: a
        # probe that failed once is not yet a lost site.
        self.site_lost_after_s = site_lost_after_s

    async def resubmit_intent(self, task: TaskRecord, a: AttemptRecord) -> None:
        """The intent was written but the scheduler never saw the job: submit it now, same name
        (when it is still its task's newest attempt), else place the task again."""
        atts = await self.book.load_attempts(task.id)
        if task.state.terminal or a.superseded:  # ended, cancelled or set aside meanwhile
            a.state, a.superseded, a.ended_at = JobState.FAILED, True, self.clock()
            a.reason = a.reason or "never reached the scheduler (its submission was lost)"
            async with self.book.store.transaction() as tx:
                await self.book.save_attempts(tx, a, at=self.clock())
            return
        if live_others(atts, a.n):
            a.state, a.ended_at = JobState.FAILED, self.clock()  # never reached a scheduler
            await set_aside(self.book, task, a, "its submission was lost")
            return  # a hedged copy of it goes on elsewhere
        newest = max((x.n for x in atts), default=a.n)
        log.info("resubmitting lost intent", task=task.id, attempt=a.n)
        if a.n == newest:  # its name is reused only while no later attempt has one
            task.attempts_made = a.n - 1
            decision = await self.planner.decide(task)
            if isinstance(decision, Placement) and (decision.site, decision.partition) == (
                a.site,
                a.partition,
            ):
                await self.dispatcher.later(task, decision)
                return
        # Placed elsewhere now (or nowhere yet): the lost intent is set aside, never counted as
        # a failed try (no job ever ran), and the task goes back to the queue to be placed like
        # new work, under the next attempt's name (the lost one is never reused).
        now = self.clock()
        a.state, a.superseded, a.ended_at = JobState.FAILED, True, now
        a.reason = "never reached the scheduler (its submission was lost); placed again"
        task.attempts_made = newest
        task.state = JobState.QUEUED
        task.decision = "queued: its submission was lost before the scheduler saw it; placing"
        async with self.book.store.transaction() as tx:
            await self.book.save(tx, task, a, at=now)

    async def after_end(self, task: TaskRecord, a: AttemptRecord) -> None:
        """An attempt ended: accept it, retry, extend, or end the task with one event."""
        if task.state.terminal or a.outrun_by is not None:
            return  # a hedged copy another outran: cancelled, its end is nobody's result
        if a.state is JobState.COMPLETED:
            await self._accept(task, a)
            return
        if a.superseded:
            return
        atts = await self.book.load_attempts(task.id)
        done = [x for x in atts if x.state is JobState.COMPLETED and x.outrun_by is None]
        if done:  # a hedged copy completed (its end missed by a leader crash): the result
            await self._accept(task, done[0])
            return
        if await set_aside(self.book, task, a, f"{a.native_state or a.state.value} on {a.site}"):
            return  # a hedged copy of it goes on elsewhere
        budget = task.request.adaptation
        if a.state is JobState.TIMEOUT and task.extensions_used < budget.max_wall_extensions:
            cap = self.collector.sites[a.site].profile.partition(a.partition).max_wall_s
            longer = min(int(a.shape.wall_time_s * budget.wall_factor), cap)
            if longer > a.shape.wall_time_s:
                task.extensions_used += 1
                decision = await self.planner.decide(task, wall_s=longer)
                if isinstance(decision, Placement):
                    await place_again(self.hedger, self.dispatcher, task, decision)
                    return
        if a.state in (JobState.FAILED, JobState.UNSCHEDULABLE) and (
            task.retries_used < budget.max_retries
        ):
            task.retries_used += 1
            exclude = (a.site,) if a.state is JobState.UNSCHEDULABLE else ()
            decision = await self.planner.decide(task, exclude=exclude)
            if isinstance(decision, Placement):
                await place_again(self.hedger, self.dispatcher, task, decision, avoid=exclude)
                return
        task.state = JobState.CANCELLED if a.state is JobState.CANCELLED else a.state
        task.reasons = (
            f"attempt {a.n} on {a.site}: {a.native_state or a.state.value}"
            + (f" (exit {a.exit_code})" if a.exit_code else ""),
        )
        kind = "task.terminal" if a.state is JobState.CANCELLED else "task.retry_exhausted"
        async with self.book.store.transaction() as tx:
            await self.book.save(tx, task, at=self.clock())
            await self.book.emit(
                tx,
                kind,
                task,
                site=a.site,
                attempt=a.n,
                job_id=a.job_id,
                reason=task.reasons[0],
                retries=task.retries_used,
                extensions=task.extensions_used,
            )

    async def _accept(self, task: TaskRecord, a: AttemptRecord) -> None:
        """The first completed attempt is the result; every other live attempt is cancelled."""
        task.state, task.accepted_attempt = JobState.COMPLETED, a.n
        others = [
            x for x in await self.book.load_attempts(task.id) if x.n != a.n and not x.state.terminal
        ]
        for x in others:
            if not x.superseded:  # a hedged copy still in play: this one finished first
                x.outrun_by, x.reason = a.n, f"hedged copy: cancelled, attempt {a.n} finished first"
            x.superseded = True
            self.cancels.owe(x)
        quiet = await staging.consumed_downstream(
            self.book.store, task
        )  # the next task's outcome will report
        async with self.book.store.transaction() as tx:
            await self.book.save(tx, task, *others, at=self.clock())
            if task.group_id is None and not quiet:  # a group's children report once, as the round
                await self.book.emit(
                    tx,
                    "task.terminal",
                    task,
                    site=a.site,
                    attempt=a.n,
                    job_id=a.job_id,
                    wait_s=a.wait_s,
                    runtime_s=a.runtime_s,
                )

    async def site_lost(self, site: str, atts: list[AttemptRecord]) -> None:
        """The site is offline: move its queued work elsewhere within each task's re-placement
        budget; running jobs keep their chance. Work that stays there (running, nowhere else to
        go, or the budget spent) wakes the agent once per attempt, after `site_lost_after_s`."""
        went = await self.book.store.last_event("site.offline", site)
        lost_s = (self.clock() - went.created_at).total_seconds() if went is not None else 0.0
        stuck: dict[str, list[str]] = {}  # group -> its children that stay on the lost site
        for a in atts:
            if a.superseded:
                continue
            task = await self.book.load_task(a.task_id)
            if task.state.terminal:
                continue
            owed = a.cancel_pending
            self.cancels.owe(a)  # saved by set_aside when a hedged copy goes on elsewhere
            if await set_aside(self.book, task, a, f"{a.site} offline"):
                continue  # this copy is not waited for: cancelled when its site answers
            a.cancel_pending = owed  # not set aside: as it was
            why = "its job was running there and may still be"
            if a.state is not JobState.RUNNING:
                why = "no re-placement left in its adaptation budget"
                if task.replacements_used < task.request.adaptation.max_replacements:
                    decision = await self.planner.decide(task, exclude=(a.site,))
                    if isinstance(decision, Placement):
                        task.replacements_used += 1
                        a.superseded = True
                        self.cancels.owe(a)
                        a.reason = f"re-placed: {a.site} offline"
                        async with self.book.store.transaction() as tx:
                            await self.book.save(tx, task, a, at=self.clock())
                            await self._moved(tx, task, a, decision, f"{a.site} offline")
                        await place_again(
                            self.hedger, self.dispatcher, task, decision, avoid=(a.site,)
                        )
                        log.info(
                            "re-placed from lost site", task=task.id, old=a.site, new=decision.site
                        )
                        continue
                    why = f"no other site fits: {decision.hint}"
            if lost_s < self.site_lost_after_s:
                continue
            reason = f"{a.site} offline for {lost_s:.0f}s; attempt {a.n}: {why}"
            async with self.book.store.transaction() as tx:
                await self.book.emit(
                    tx,
                    "task.site_lost",
                    task,
                    key=f"{a.n}",
                    site=a.site,
                    attempt=a.n,
                    job_id=a.job_id,
                    attempt_state=a.state.value,
                    reason=reason,
                )
            if task.group_id:
                stuck.setdefault(task.group_id, []).append(task.id)
        outage = went.seq if went is not None else 0
        for gid, children in stuck.items():
            await self._group_site_lost(gid, site, children, lost_s=lost_s, outage=outage)

    async def _group_site_lost(
        self, gid: str, site: str, children: list[str], *, lost_s: float, outage: int
    ) -> None:
        """A group's continuation hears its children's lost site once per outage, as one event
        (it hears no per-child events): how many stay there, which, and what it can do."""
        reason = (
            f"{site} offline for {lost_s:.0f}s: {len(children)} children of the group stay "
            "there (running, or nowhere else to go)"
        )
        async with self.book.store.transaction() as tx:
            await tx.append_event(
                "group.site_lost",
                gid,
                {
                    "group_id": gid,
                    "site": site,
                    "children": len(children),
                    "task_ids": children[:_LOST_IDS],
                    "reason": reason,
                    "result": f"fedhpc://groups/{gid}",
                },
                at=self.clock(),
                key=f"group.site_lost:{gid}:{site}:{outage}",
            )

    async def adapt_pending(self) -> None:
        """Move long-pending attempts when another placement finishes sooner by the task's
        margin; gather the cancels still owed (`owed`: the caller sends them after the lock,
        `cancels.send`)."""
        now = self.clock()
        self.owed = []
        budgets: dict[str, dict[str, Any]] | None = None
        for row in await self.book.store.attempts_in(ACTIVE_STATES):
            # One attempt's failure is its own: the others are still adapted this cycle.
            with isolated("adapting an attempt failed", task=row["task_id"], attempt=row["n"]):
                if budgets is None and row["state"] == JobState.PENDING.value:
                    budgets = await self.book.store.pending_budgets()  # once per cycle
                await self._adapt(AttemptRecord.from_row(row), budgets or {}, now)

    async def _adapt(
        self, a: AttemptRecord, budgets: dict[str, dict[str, Any]], now: datetime
    ) -> None:
        """One active attempt: a long-pending one is moved when another placement finishes
        sooner by its task's margin."""
        if a.superseded:
            if a.cancel_pending:
                self.owed.append(a)  # sent with `cancels.send`, after the lock
            return
        if a.state is not JobState.PENDING or a.pending_since is None:
            return  # nothing to move: its task is not loaded
        cheap = budgets.get(a.task_id)
        if cheap is not None and not _may_move(cheap, (now - a.pending_since).total_seconds()):
            return  # not due (or no budget left): its task is not loaded
        task = await self.book.load_task(a.task_id)
        budget = task.request.adaptation
        if live_others(await self.book.load_attempts(task.id), a.n):
            return  # hedged: its copies already wait elsewhere, the first to start runs
        if (
            not budget.replace_pending
            or task.replacements_used >= budget.max_replacements
            or (now - a.pending_since).total_seconds() < budget.replace_after_s
        ):
            return
        await self.replace_if_better(task, a, margin_s=budget.replace_margin_s)

    async def _moved(
        self, tx: Tx, task: TaskRecord, a: AttemptRecord, to: Placement, why: str
    ) -> None:
        """`task.moved`, in the transaction that supersedes the attempt: from where, to where
        and why (once per attempt; it wakes nobody by default: the task goes on elsewhere)."""
        await self.book.emit(
            tx,
            "task.moved",
            task,
            key=f"{a.n}",
            site=a.site,
            attempt=a.n,
            job_id=a.job_id,
            moved_from=f"{a.site}/{a.partition}",
            moved_to=f"{to.site}/{to.partition}",
            reason=why,
        )

    async def replace_if_better(
        self, task: TaskRecord, a: AttemptRecord, *, margin_s: float
    ) -> bool:
        """Re-place a pending attempt when the best placement now beats staying by `margin_s`."""
        decision = await self.planner.decide(
            task, score=((a.site, a.partition),)
        )  # staying, scored
        if not isinstance(decision, Placement):
            return False
        if (decision.site, decision.partition) == (a.site, a.partition):
            return False
        stay = [
            c.estimates.completion_s
            for c in decision.trace.candidates
            if c.site == a.site and c.partition == a.partition and c.estimates is not None
        ]
        if stay and decision.estimates.completion_s + margin_s >= min(stay):
            return False
        task.replacements_used += 1
        a.superseded, a.reason = True, f"re-placed to {decision.site}/{decision.partition}"
        self.cancels.owe(a)
        to = f"{decision.site}/{decision.partition}"
        why = f"pending on {a.site}/{a.partition}; {to} finishes sooner"
        if stay:
            why += f" (~{decision.estimates.completion_s:.0f} s vs ~{min(stay):.0f} s staying)"
        async with self.book.store.transaction() as tx:
            await self.book.save(tx, task, a, at=self.clock())
            await self._moved(tx, task, a, decision, why)
        await self.dispatcher.later(task, decision)
        log.info("re-placed pending", task=task.id, old=a.site, new=decision.site)
        return True
