"""A placed task's submission, with fallback (`fallback.py`: a scheduler that refuses a
candidate the rules accepted sends the task to the next feasible site). Submissions go through
per-site lanes: at most `PER_SITE` remote calls in flight per site (`submits_in_flight` in the
site's config), each carrying every job for that site that is waiting when it starts (up to
`BATCH_MAX`, and the burst of the site's command cap; alike group children as job arrays,
`array_forming.py`), none of them under the orchestrator's lock; a failure of the task's own
never cancels its batch-mates."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import cast

import anyio
import structlog
from anyio.abc import TaskGroup

from fedhpc.adapters.arrays import array_dialect
from fedhpc.collector import Collector
from fedhpc.domain.job import JobState
from fedhpc.logs import isolated
from fedhpc.ops.task_views import TaskHandle
from fedhpc.orchestrator.array_caps import ArrayCaps
from fedhpc.orchestrator.array_forming import Prepared, array_key, array_max, refused_arrays
from fedhpc.orchestrator.book import TaskBook
from fedhpc.orchestrator.dispatch import Dispatcher, Intent
from fedhpc.orchestrator.fallback import Fallback, moved_on
from fedhpc.orchestrator.hedging import HedgePlan
from fedhpc.orchestrator.planner import Planner
from fedhpc.orchestrator.records import AttemptRecord, TaskRecord
from fedhpc.placement import Placement, Unschedulable
from fedhpc.placement.estimators import WaitHistory

__all__ = ["BATCH_MAX", "PER_SITE", "Submitter"]

log = structlog.get_logger(__name__)

PER_SITE = 2  # submit calls in flight per site, unless its config says otherwise
BATCH_MAX = 25  # jobs in one submit call (one remote call: a script that runs each sbatch)


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
        signal: Callable[[], None] = lambda: None,
    ) -> None:
        self.book = book
        self.dispatcher = dispatcher
        self.lock = lock
        self.clock = clock
        # A job its scheduler refused goes to the next feasible site (`Fallback`).
        self.fallback = Fallback(
            book,
            planner,
            dispatcher,
            collector,
            lock=lock,
            clock=clock,
            unschedulable=unschedulable,
            limiter=self._limiter,
        )
        self.signal = signal  # told after a submit call's outcomes are recorded
        self.limits: dict[str, anyio.CapacityLimiter] = {}
        self.ready: list[Prepared] = []  # intents written by `prepare`, for `send`
        self.pending: dict[str, list[Prepared]] = {}  # site -> intents waiting for a lane
        self.lanes: dict[str, int] = {}  # site -> lanes running
        self.background: TaskGroup | None = None  # the placer's, while it runs
        # While a placement pass runs: group children that could share an array wait for the
        # pass's end (`finish_pass`), so a sweep placed in batches goes as a few big arrays.
        self.placing = False
        # Elements per array at a site whose scheduler refused a bigger one (halved on each
        # refusal, doubled back after an hour without one).
        self.array_caps = ArrayCaps()
        # (task, attempt) of hedged copies not sent yet: one may be set aside before its lane
        # reaches it (`_not_set_aside`).
        self.hedged: set[tuple[str, int]] = set()

    def in_flight(self, site: str) -> int:
        """Submit calls at once at `site`: its config's `submits_in_flight`, else `PER_SITE`."""
        adapter = self.dispatcher.adapters.get(site)
        return (adapter.site.user.submits_in_flight if adapter else None) or PER_SITE

    def _most(self, site: str) -> int:
        """Jobs (or arrays) in one submit call at `site`: `BATCH_MAX`, and never more than its
        command cap's burst, so that one call's `sbatch` commands never overrun the scheduler's
        own rate limiter at once (Slurm's: 30 a user)."""
        pace = getattr(self.dispatcher.adapters.get(site), "pace", None)
        return max(1, min(BATCH_MAX, getattr(pace, "burst", BATCH_MAX)))

    def _limiter(self, site: str) -> anyio.CapacityLimiter:
        limiter = self.limits.get(site)
        if limiter is None:
            limiter = self.limits[site] = anyio.CapacityLimiter(self.in_flight(site))
        return limiter

    async def finish_pass(self) -> None:
        """The placer's pass ended: what gathered for arrays is submitted now (`send`)."""
        self.placing = False
        await self.send()

    async def prepare(
        self,
        jobs: list[tuple[TaskRecord, Placement]],
        history: WaitHistory | None,
        hedges: Mapping[str, HedgePlan] | None = None,
    ) -> None:
        """Under the lock: each placed task's intent is written (no window in which a decided
        task still reads as queued), then those of its hedged copies (`hedges`, by task id);
        `send` submits them. A task whose intent cannot be written fails alone."""
        for task, p in jobs:
            plan = (hedges or {}).get(task.id)
            try:
                prepared = await self.dispatcher.prepare(task, p, note=plan.note if plan else "")
            except Exception as exc:  # this task's failure, never its batch-mates'
                with isolated("recording a failed dispatch failed", task=task.id):
                    await self.fallback.fail(task, p, exc)
                continue
            self.ready.append((task, p, prepared, history))
            first = task.attempts_made
            if plan and plan.copies and isinstance(prepared, Intent):
                self.hedged.add((task.id, prepared.att.n))
            for q in plan.copies if plan else ():
                try:  # a copy that cannot be written is dropped alone: the first one goes on
                    copy = await self.dispatcher.prepare(task, q, copy_of=first)
                except Exception:
                    log.exception("a hedged copy could not be written", task=task.id, site=q.site)
                    continue
                self.ready.append((task, q, copy, history))
                if isinstance(copy, Intent):
                    self.hedged.add((task.id, copy.att.n))

    async def send(self) -> None:
        """Without the lock: what `prepare` wrote goes to its site's lane (`_lane`): sites
        concurrently, a slow or dead site's calls holding up no other's. In the daemon
        (`background` set) the lanes run in the placer's task group and this returns at once:
        the next placement never waits for a submission; else it returns when all are done."""
        ready, self.ready = self.ready, []
        if self.background is None:
            async with anyio.create_task_group() as tg:
                self._queue(ready, tg)
            return
        self._queue(ready, self.background)

    def _queue(self, ready: list[Prepared], tg: TaskGroup) -> None:
        """Intents join their site's queue; lanes start up to the site's limit."""
        for item in ready:
            task, p, prepared, history = item
            if isinstance(prepared, Intent):
                self.pending.setdefault(p.site, []).append(item)
            else:  # failed before any job existed: straight to its fallback
                tg.start_soon(self._dispatch, task, p, prepared, history)
        for site, queue in self.pending.items():
            while queue and self.lanes.get(site, 0) < self.in_flight(site):
                self.lanes[site] = self.lanes.get(site, 0) + 1
                tg.start_soon(self._lane, site, tg, name=f"submit:{site}")

    async def _lane(self, site: str, tg: TaskGroup) -> None:
        """One lane of `site`: while intents wait, one submit call for a share of them, then
        each refused job's fallback. The lanes deal what waits like cards (lane one the 1st,
        3rd, 5th..., lane two the 2nd, 4th...; at most `BATCH_MAX` each), so that jobs reach
        the scheduler in the order they were placed, neighbours at most swapped."""
        try:
            while queue := self.pending.get(site):
                if chunks := self._arrays(site, queue):
                    await self._call_arrays(chunks, tg)
                    continue
                ready = [q for q in queue if not self._gathering(site, q)]
                if not ready:
                    break  # array members still gathering: sent when the pass ends
                stride = max(1, self.lanes[site])
                size = max(1, min(self._most(site), -(-len(ready) // stride)))
                items = [ready[i] for i in range(0, len(ready), stride)[:size]]
                taken = {id(item) for item in items}
                self.pending[site] = [q for q in queue if id(q) not in taken]
                await self._call(items, tg)
        finally:
            self.lanes[site] -= 1

    def _arrays(self, site: str, queue: list[Prepared]) -> list[list[Prepared]]:
        """Group children waiting for `site` that differ only in their commands and folders,
        taken from its queue in chunks of at most FEDHPC_ARRAY_MAX (at most `BATCH_MAX`
        chunks): each goes as one job array (one scheduler command), when the site's
        scheduler runs arrays."""
        most = self._array_most(site)
        if not self._arrays_at(site, most):
            return []
        alike: dict[str, list[Prepared]] = {}
        for item in queue:
            if (key := array_key(item)) is not None:
                alike.setdefault(key, []).append(item)
        chunks = [
            run[k : k + most]
            for run in alike.values()
            if len(run) >= 2
            for k in range(0, len(run), most)
        ]
        # While the placer's pass goes on, only full chunks: the rest gather more members.
        least = most if self.placing else 2
        chunks = [c for c in chunks if len(c) >= least][: self._most(site)]
        taken = {id(item) for chunk in chunks for item in chunk}
        self.pending[site] = [q for q in queue if id(q) not in taken]
        return chunks

    def _arrays_at(self, site: str, most: int) -> bool:
        return most >= 2 and array_dialect(self.dispatcher.adapters[site].dialect) is not None

    def _gathering(self, site: str, item: Prepared) -> bool:
        """A would-be array member held back while the placer's pass goes on (`placing`): its
        siblings placed later in the pass join the same array."""
        most = self._array_most(site)
        return self.placing and array_key(item) is not None and self._arrays_at(site, most)

    def _array_most(self, site: str) -> int:
        """Elements per array at `site`: FEDHPC_ARRAY_MAX, or less after refusals there."""
        return min(array_max(), self.array_caps.most(site, self.clock()))

    async def _call_arrays(self, chunks: list[list[Prepared]], tg: TaskGroup) -> None:
        """One submit call for `chunks`, each chunk one array: its membership written first
        (`Dispatcher.join_array`, under the lock); a member left out goes alone, in the same
        call."""
        items: list[Prepared] = []
        alone: list[Prepared] = []
        async with self.lock:
            for chunk in chunks:
                intents = [cast(Intent, c[2]) for c in chunk]
                try:
                    members = await self.dispatcher.join_array(intents)
                except Exception:  # this array's trouble: its members go alone, the lane on
                    log.exception(
                        "forming a job array failed: its members go alone",
                        site=chunk[0][1].site,
                        members=len(chunk),
                    )
                    for intent in intents:
                        intent.att.array_name = intent.att.array_index = None
                    members = []
                joined = {id(m) for m in members}
                items += sorted(
                    (c for c in chunk if id(c[2]) in joined),
                    key=lambda c: cast(Intent, c[2]).att.array_index or 0,
                )
                alone += [c for c in chunk if id(c[2]) not in joined]
        await self._call(items + alone, tg)

    async def _call(self, items: list[Prepared], tg: TaskGroup) -> None:
        """One submit call for `items` (one site's intents); a job refused there tries the
        next site on its own (`_dispatch`); a call that fails outright fails its tasks."""
        items = await self._not_set_aside(items)
        if not items:
            return
        intents = [cast(Intent, prepared) for _, _, prepared, _ in items]  # `_queue` put them
        try:
            async with self._limiter(items[0][1].site):
                atts = await self.dispatcher.complete_many(intents)
        except Exception as exc:  # typed or not: these tasks' failure, never the lane's
            async with self.lock:
                for task, p, _, _ in items:
                    with isolated("recording a failed dispatch failed", task=task.id):
                        await self.fallback.fail(task, p, exc)
            self.signal()
            return
        refused = refused_arrays(items, atts)
        for (task, p, prepared, history), att in zip(items, atts, strict=True):
            if att.state is JobState.FAILED and att.array_name not in refused:
                tg.start_soon(self._dispatch, task, p, prepared, history, att)
        if refused:
            await self._halve(refused, tg)
        self.signal()

    async def _not_set_aside(self, items: list[Prepared]) -> list[Prepared]:
        """`items` but the hedged copies set aside while they waited for a lane (another copy
        started first, `outrun`): never sent, so no job to cancel; each ends cancelled."""
        hedged = [i for i in items if (i[0].id, cast(Intent, i[2]).att.n) in self.hedged]
        if not hedged:
            return items
        dropped: set[int] = set()
        async with self.lock:
            for task, _, prepared, _ in hedged:
                intent = cast(Intent, prepared)
                self.hedged.discard((task.id, intent.att.n))
                atts = await self.book.load_attempts(task.id)
                stored = next((a for a in atts if a.n == intent.att.n), None)
                if stored is None or not stored.superseded or stored.job_id is not None:
                    continue
                stored.state, stored.ended_at = JobState.CANCELLED, self.clock()
                stored.cancel_pending = False
                async with self.book.store.transaction() as tx:
                    await self.book.save_attempts(tx, stored, at=self.clock())
                self.dispatcher.claims.drop(intent.claim)
                self.dispatcher.in_flight.discard(intent.att.job_name)
                dropped.add(id(prepared))
                log.info(
                    "set-aside copy not sent", task=task.id, attempt=stored.n, site=stored.site
                )
        return [i for i in items if id(i[2]) not in dropped]

    async def _halve(
        self, refused: dict[str, list[tuple[Prepared, AttemptRecord]]], tg: TaskGroup
    ) -> None:
        """Arrays of 4 or more that a site refused whole (MaxArraySize, a limit counting
        elements, the script's size): that site's arrays are half as big from now on, and
        each member still its task's goes again, in the next arrays formed, not alone."""
        again: list[Prepared] = []
        async with self.lock:
            for members in refused.values():
                site = members[0][1].site
                most = self.array_caps.refused(site, len(members), self.clock())
                log.warning(
                    "array refused: its members go again in arrays half its size",
                    site=site,
                    elements=len(members),
                    now_at_most=most,
                    reason=members[0][1].reason,
                )
                for (was, p, _, history), att in members:
                    try:
                        task = await self.book.load_task(was.id)
                        atts = await self.book.load_attempts(task.id)
                        mine = next((x for x in atts if x.n == att.n), att)
                        if task.state.terminal or mine.superseded or moved_on(atts, att):
                            continue  # cancelled, replanned or moved meanwhile
                        again.append((task, p, await self.dispatcher.prepare(task, p), history))
                    except Exception as exc:  # this member's failure: it ends with the reason
                        with isolated("recording a failed dispatch failed", task=was.id):
                            await self.fallback.fail(was, p, exc)
        self._queue(again, tg)

    async def _dispatch(
        self,
        task: TaskRecord,
        p: Placement,
        prepared: Intent | AttemptRecord,
        history: WaitHistory | None,
        first: AttemptRecord | None = None,
    ) -> None:
        """One task's submission (`first`: the attempt its lane's call already recorded); a
        failure of its own never cancels its batch-mates nor blocks the queue behind it: the
        task fails with the reason."""
        try:
            await self.fallback.submit(task, p, prepared, history, first)
        except Exception as exc:  # typed or not: this task's failure, never the batch's
            async with self.lock:
                with isolated("recording a failed dispatch failed", task=task.id):
                    await self.fallback.fail(task, p, exc)
        self.signal()
