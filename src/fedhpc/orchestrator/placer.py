"""The placer: accepted (queued) tasks are placed and handed to their schedulers in the daemon,
oldest first, in batches that share one wait-history index and one ledger of claims the
snapshot cannot show yet. A task whose placement lacks site data waits for it (queued, with
the reason); `unschedulable` is for requests no known site can satisfy."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import anyio
import structlog

from fedhpc.collector import Collector
from fedhpc.domain.config import HedgeConfig
from fedhpc.domain.job import JobState
from fedhpc.ops.task_views import TaskHandle
from fedhpc.orchestrator.batching import Batch, child_key, hold, missing_data, unheld
from fedhpc.orchestrator.book import TaskBook, handle
from fedhpc.orchestrator.claims import Claims
from fedhpc.orchestrator.dispatch import Dispatcher
from fedhpc.orchestrator.estimates import WaitInputs
from fedhpc.orchestrator.hedging import Hedger
from fedhpc.orchestrator.holdback import held_by_limits, hold_key, hold_reason
from fedhpc.orchestrator.offline_wait import OfflineWaits, offline_sites
from fedhpc.orchestrator.placing_failed import placing_failed
from fedhpc.orchestrator.planner import Planner
from fedhpc.orchestrator.records import TaskRecord
from fedhpc.orchestrator.start_estimates import SchedulerAnswer
from fedhpc.orchestrator.submitter import Submitter
from fedhpc.placement import Placement, Unschedulable

__all__ = ["BATCH", "DATA_WAIT_S", "Placer"]

log = structlog.get_logger(__name__)

BATCH = 32  # tasks placed per hold of the orchestrator's lock: control cycles interleave
DATA_WAIT_S = 600.0  # a task waits this long for missing site data, then is unschedulable


class Placer:
    """Places queued work and dispatches it: `run` whenever some arrives (`wake`), and every
    cycle for tasks that wait for data; `progress` is replaced after each batch."""

    def __init__(
        self,
        book: TaskBook,
        collector: Collector,
        planner: Planner,
        dispatcher: Dispatcher,
        *,
        claims: Claims,
        waits: WaitInputs,
        lock: anyio.Lock,
        clock: Callable[[], datetime],
        cycle_s: float,
        notify: Callable[[], None],
        site_lost_after_s: float = 300.0,
        hedge: HedgeConfig | None = None,
    ) -> None:
        self.book = book
        self.collector = collector
        self.planner = planner
        self.claims = claims
        self.waits = waits
        self.lock = lock  # placement, intents and the merge of observations: one at a time
        self.clock = clock
        self.cycle_s = cycle_s
        self.notify = notify  # told after events may have landed
        self.wake_event = anyio.Event()  # queued work arrived
        self.progress = anyio.Event()  # set (and replaced) after each placement batch
        # A task only offline sites could run waits for them; its agent hears it once per
        # outage, after the same grace as work stuck on a lost site.
        self.offline = OfflineWaits(book, collector, clock=clock, after_s=site_lost_after_s)
        self.hedger = Hedger(book, collector, planner, defaults=hedge or HedgeConfig(), clock=clock)
        self.submitter = Submitter(
            book,
            planner,
            dispatcher,
            collector,
            lock=lock,
            clock=clock,
            unschedulable=self.unschedulable,
            signal=self._signal,
        )

    def wake(self) -> None:
        """Queued work arrived (or may go now): place it without waiting for the cycle."""
        self.wake_event.set()

    async def wait_placed(self, task_ids: str | list[str], wait_s: float) -> None:
        """Wait until none of `task_ids` is queued any more, or `wait_s` has passed."""
        ids = [task_ids] if isinstance(task_ids, str) else task_ids
        with anyio.move_on_after(wait_s):
            while True:
                progress = self.progress
                rows = [await self.book.store.get_task(t) for t in ids]
                if all(r is None or r["state"] != JobState.QUEUED.value for r in rows):
                    return
                await progress.wait()

    async def unschedulable(self, task: TaskRecord, u: Unschedulable) -> TaskHandle:
        task.state = JobState.UNSCHEDULABLE
        task.reasons = (u.hint, *(f"{r.id}: {'; '.join(r.reasons)}" for r in u.reasons[:8]))
        task.decision = f"unschedulable: {u.hint}"
        async with self.book.store.transaction() as tx:
            await self.book.save(tx, task, at=self.clock())
            await self.book.emit(tx, "task.unschedulable", task, reason=u.hint)
        return handle(task, None)

    async def run(self, stopping: anyio.Event) -> None:
        """Place queued work whenever some arrives (`wake`), and every cycle for tasks
        that wait for data. Starts after this process's first probe of every site."""
        while not self.collector.ready.is_set() and not stopping.is_set():
            with anyio.move_on_after(0.5):
                await self.collector.ready.wait()
        async with anyio.create_task_group() as sends:  # a slow site's submission outlives its pass
            self.submitter.background = sends
            try:
                while not stopping.is_set():
                    wake = self.wake_event = anyio.Event()
                    try:
                        await self.place_queued()
                    except Exception:  # a bad pass is logged and retried, never fatal
                        log.exception("placement pass failed")
                    with anyio.move_on_after(self.cycle_s):
                        await wake.wait()
            finally:
                self.submitter.background = None

    def _signal(self) -> None:
        progress, self.progress = self.progress, anyio.Event()
        progress.set()
        self.notify()

    async def place_queued(self) -> int:
        """One pass over every queued task, in batches; the number dispatched."""
        self.submitter.placing = True  # a group's children gather into arrays meanwhile
        try:
            return await self._pass()
        finally:
            await self.submitter.finish_pass()

    async def _pass(self) -> int:
        dispatched = 0
        after = ("", "")
        held: dict[str, str] = {}  # hold_key -> why such tasks wait (limits, bound) in this pass
        self.offline.forget()
        self.planner.new_pass()  # each person's spending read afresh (`person_budget`)
        self.hedger.new_pass()  # each person's hedged copies counted afresh
        while True:
            # A held group's younger children as submitted are not read again in this pass:
            # one placement per held group and pass, whatever its size (a child that replan
            # changed is read and placed on its own).
            groups = sorted(k for k in held if not k.startswith("~"))
            rows = await self.book.store.queued_tasks(BATCH, after=after, skip_groups=groups)
            if not rows:
                break
            after = (str(rows[-1]["created_at"]), str(rows[-1]["id"]))
            tasks = [t for r in rows if (t := await self._record(r)) is not None]
            # The schedulers' start estimates are asked without the lock (a round trip per
            # site, up to FEDHPC_ESTIMATE_TIMEOUT_S): control cycles, cancels and replans go on
            # meanwhile; the batch is then decided under it on its tasks as stored then.
            answer = await self._ask(unheld(tasks, held, []))
            async with self.lock:
                dispatched += await self._batch(await self._still_queued(tasks), held, answer)
            self._signal()  # placed: their submits answer now, never after the submissions
            await self.submitter.send()  # the batch's jobs, submitted without the lock
        if held:
            async with self.book.store.transaction() as tx:
                for gid, reason in sorted(held.items()):
                    if not gid.startswith("~"):
                        await tx.set_queued_decision(gid, reason, at=self.clock())
        return dispatched

    async def _record(self, row: dict[str, Any]) -> TaskRecord | None:
        """The row's task, or None for a row that no longer reads as one (written by another
        version, edited by hand): it leaves the queue as failed, with the reason, alone."""
        try:
            return TaskRecord.model_validate(row["body"])
        except Exception as exc:
            log.exception("unreadable queued task", task=row["id"])
            body = dict(row["body"]) if isinstance(row["body"], dict) else {}
            reason = f"its stored record cannot be read ({type(exc).__name__}); not placed"
            body.update(state=JobState.FAILED.value, reasons=[reason], decision=f"failed: {reason}")
            tid, now = str(row["id"]), self.clock()
            event: dict[str, object] = {"task_id": tid, "state": JobState.FAILED.value}
            event.update(result=f"fedhpc://tasks/{tid}", reason=reason)
            if row.get("group_id"):
                event["group_id"] = row["group_id"]
            async with self.book.store.transaction() as tx:
                await tx.put_task(tid, state=JobState.FAILED.value, body=body, at=now)
                key = f"task.retry_exhausted:{tid}"  # as book.emit keys it: once per task
                await tx.append_event("task.retry_exhausted", tid, event, at=now, key=key)
            return None

    async def _ask(self, tasks: list[TaskRecord]) -> SchedulerAnswer | None:
        """One scheduler answer for a batch (a group's children share it): one call per site.
        Only estimates: a failure leaves the batch without them, never unplaced."""
        if not tasks:
            return None
        try:
            history = await self.waits.history()
            return await self.planner.prefetch(tasks, history=history, ledger=self.claims.ledger())
        except Exception:
            log.exception("scheduler estimates failed; placing without them")
            return None

    async def _still_queued(self, tasks: list[TaskRecord]) -> list[TaskRecord]:
        """Under the lock: the batch's tasks as stored now, those still queued (one cancelled
        or placed by a replan while the schedulers were asked is left as it is)."""
        out = []
        for task in tasks:
            row = await self.book.store.get_task(task.id)
            queued = row is not None and row["state"] == JobState.QUEUED.value
            if queued and row is not None and (now := await self._record(row)) is not None:
                out.append(now)
        return out

    async def _batch(
        self, tasks: list[TaskRecord], held: dict[str, str], answer: SchedulerAnswer | None
    ) -> int:
        """Place one batch, with the schedulers' `answer` asked for it; `held` (shared by the
        pass, by `hold_key`) names work that waits for the user's job limits: tasks held alike
        wait too, without a placement each. A task whose placement raises ends alone
        (`_failed`): the batch goes on with the others."""
        b = Batch(
            held=held,
            history=await self.waits.history(),
            ledger=self.claims.ledger(),
            now=self.clock(),
            answer=answer,
        )
        tasks = unheld(tasks, held, b.holds)
        i = 0
        while i < len(tasks):
            task = tasks[i]
            i += 1
            if (key := hold_key(task)) in held:
                hold(task, held[key], b.holds)
                continue
            run = [task]  # what a failure ends: the task, or its run of equal siblings
            try:
                gid = task.group_id
                if gid is not None and gid not in b.spread:
                    b.spread[gid] = await self._spread(gid)
                if gid is not None and not b.spread[gid]:
                    # Siblings asking the same thing: one pass places them all (`place_group`).
                    while i < len(tasks) and child_key(tasks[i]) == child_key(task):
                        run.append(tasks[i])
                        i += 1
                    await self._run(run, b)
                else:
                    await self._one(task, b)
            except Exception as exc:  # this task's (or run's) failure, never the batch's
                await placing_failed(self.book, run, exc, self.clock())
        if b.holds:
            async with self.book.store.transaction() as tx:
                for task in b.holds:
                    await self.book.save(tx, task, at=b.now)
        await self.submitter.prepare(b.jobs, b.history, b.hedges)  # intents now; sent by `send`
        return len(b.jobs)

    async def _run(self, run: list[TaskRecord], b: Batch) -> None:
        """A group's siblings with equal inputs, decided in one pass; each settled in order:
        held, unplaced, or on its way (place_group has claimed it in the ledger)."""
        decisions = await self.planner.decide_children(
            run, history=b.history, ledger=b.ledger, answer=b.answer
        )
        for child, decision in zip(run, decisions, strict=True):
            key = hold_key(child)
            if key in b.held:  # an earlier sibling is held: so is this one (the same inputs)
                hold(child, b.held[key], b.holds)
            elif isinstance(decision, Unschedulable):
                try:
                    await self._unplaced(child, decision, b)
                except Exception as exc:  # this child's, not its siblings'
                    await placing_failed(self.book, [child], exc, self.clock())
            else:
                self.planner.placed(child, decision)
                b.jobs.append((child, decision))
                await self._hedge(child, decision, b)

    async def _one(self, task: TaskRecord, b: Batch) -> None:
        """A task decided on its own (a spread group's child avoids its siblings' systems)."""
        gid = task.group_id
        if gid is not None:
            if gid not in b.used:
                b.used[gid] = set(await self.book.store.group_sites(gid))
            task.avoid_sites = tuple(sorted(b.used[gid]))
        decision = await self.planner.decide(
            task, exclude=self.planner.full(), history=b.history, ledger=b.ledger, answer=b.answer
        )
        if isinstance(decision, Unschedulable):
            await self._unplaced(task, decision, b)
            return
        p = decision
        b.ledger.claim(p.site, p.partition, p.account, p.shape, p.estimates.charge)
        self.planner.placed(task, p)
        if gid is not None and gid in b.used:
            b.used[gid].add(p.site)
        b.jobs.append((task, p))
        await self._hedge(task, p, b)

    async def _hedge(self, task: TaskRecord, p: Placement, b: Batch) -> None:
        """The placed task's hedged copies (`Hedger.plan`), claimed like any placement; a plan
        that fails leaves the task unhedged (its placement stands)."""
        try:
            plan = await self.hedger.plan(
                task, p, history=b.history, ledger=b.ledger, answer=b.answer
            )
        except Exception:
            log.exception("hedging failed: placed without copies", task=task.id)
            return
        for q in plan.copies:
            b.ledger.claim(q.site, q.partition, q.account, q.shape, q.estimates.charge)
            self.planner.placed(task, q)
        if plan.note:
            b.hedges[task.id] = plan

    async def _unplaced(self, task: TaskRecord, u: Unschedulable, b: Batch) -> None:
        """No placement now (`u`, decided without the sites at this cycle's submission bound):
        held when only the user's job limits stand in the way, or only the bound (it fits once
        the full sites count again: next cycle), its kind with it; waiting when only offline
        sites could run it (`offline_wait`); else waiting for site data, or unschedulable with
        what really rules it out."""
        full = self.planner.full()
        held, holds = b.held, b.holds
        for attempt in range(2):
            limits = held_by_limits(self.collector, u, b.ledger)
            if limits:  # waits in fedhpc, never in a scheduler's rejection
                held[hold_key(task)] = reason = hold_reason(limits)
                hold(task, reason, holds)
                return
            if attempt or not full:
                break
            again = await self.planner.decide(
                task, history=b.history, ledger=b.ledger, answer=b.answer
            )
            if isinstance(again, Placement):  # only the bound is in the way
                held[hold_key(task)] = reason = self._bound_reason(full)
                hold(task, reason, holds)
                return
            u = again  # the full sites cannot run it either: their reasons count too
        sites = offline_sites(self.collector, u)
        if sites:  # it fits once one of them answers: it waits, as a pinned task would
            reason = await self.offline.reason(sites)
            if not (key := hold_key(task)).startswith("~"):
                held[key] = reason  # its group's children as submitted wait with it
            await self.offline.hold(task, sites, reason, b.now)
            return
        await self._unplaceable(task, u, b.now)

    def _bound_reason(self, sites: tuple[str, ...]) -> str:
        return (
            f"queued: {self.planner.submits_per_cycle} jobs already sent to "
            f"{', '.join(sites)} in this control cycle (the per-site bound, "
            "FEDHPC_SUBMITS_PER_CYCLE); placed next cycle"
        )

    async def _spread(self, gid: str) -> bool:
        group = await self.book.store.get_group(gid)
        return bool(group and group["body"].get("spread"))

    async def _unplaceable(self, task: TaskRecord, u: Unschedulable, now: datetime) -> None:
        """Hold the task while site data is missing (bounded), else it is unschedulable."""
        waiting = missing_data(self.collector, u)
        held_s = (now - task.created_at).total_seconds()
        if waiting and held_s < DATA_WAIT_S:
            reason = (
                f"queued: waiting for fresh data from {', '.join(waiting)} (not probed yet, "
                "or too old); placed when it arrives"
            )
            if task.decision != reason:
                task.decision = reason
                async with self.book.store.transaction() as tx:
                    await self.book.save(tx, task, at=now)
            return
        if waiting:
            u = u.model_copy(
                update={
                    "hint": f"{u.hint} (no fresh data from {', '.join(waiting)} for {held_s:.0f} s)"
                }
            )
        await self.unschedulable(task, u)
