"""Observation in each control cycle: every active attempt is observed (one status call per
site, accounting for the jobs that left the queue) and merged monotonically; an attempt that
ended goes to `Adaptation`, work on an offline site to its `site_lost`."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from datetime import datetime

import anyio
import structlog

from fedhpc.adapters.site import SiteAdapter
from fedhpc.adapters.transports.base import TransportError
from fedhpc.collector import Collector
from fedhpc.domain.job import AccountingRecord, JobObservation, JobState, merge_state
from fedhpc.orchestrator.adapt import ACTIVE_STATES, Adaptation
from fedhpc.orchestrator.book import TaskBook
from fedhpc.orchestrator.claims import Claims, Ended
from fedhpc.orchestrator.liveness import offline, online
from fedhpc.orchestrator.records import AttemptRecord

__all__ = ["Control"]

log = structlog.get_logger(__name__)

SETTLE_RETRIES = 4
SETTLE_PAUSE_S = 0.2
BACKFILL_S = 120.0  # how long to wait for slurmdbd to complete a final row


class Control:
    """Observes attempts at their sites and records what the schedulers say."""

    def __init__(
        self,
        book: TaskBook,
        collector: Collector,
        adapters: Mapping[str, SiteAdapter],
        adaptation: Adaptation,
        claims: Claims,
        *,
        wake_placer: Callable[[], None],
        clock: Callable[[], datetime],
        intent_grace_s: float,
    ) -> None:
        self.book = book
        self.collector = collector
        self.adapters = adapters
        self.adaptation = adaptation
        self.claims = claims
        self.wake_placer = wake_placer  # work held by a per-user limit may go now
        self.clock = clock
        # An intent (attempt written, job id unknown) younger than this may still be in sbatch:
        # only older intents that the scheduler does not know are submitted again.
        self.intent_grace_s = intent_grace_s
        # site -> job id -> (task id, attempt n, monotonic time): attempts that ended on a final
        # but not yet settled accounting row; their eligible time is filled in when it settles.
        self.unsettled: dict[str, dict[str, tuple[str, int, float]]] = {}

    async def observe(self) -> None:
        """Observe every active attempt, site by site; one site's failure is its own."""
        rows = await self.book.store.attempts_in(ACTIVE_STATES)
        by_site: dict[str, list[AttemptRecord]] = defaultdict(list)
        for row in rows:
            by_site[row["site"]].append(AttemptRecord.from_row(row))
        for site, atts in sorted(by_site.items()):
            if offline(self.collector, site):
                await self.adaptation.site_lost(site, atts)
                continue
            if not online(self.collector, site):
                continue  # not probed yet: nothing to conclude
            try:
                await self._observe(site, atts)
            except TransportError as exc:
                log.warning("observe failed", site=site, error=exc.message)
            except Exception:  # one site's bad answer must not stall the others
                log.exception("observe failed", site=site)
        for site in [s for s in self.unsettled if s not in by_site and online(self.collector, s)]:
            try:
                await self._backfill(site, None)
            except Exception:  # accounting details only: never stalls the cycle
                log.exception("accounting backfill failed", site=site)

    async def _observe(self, site: str, atts: list[AttemptRecord]) -> None:
        adapter = self.adapters[site]
        now = self.clock()
        intents = [a for a in atts if a.job_id is None]
        if intents:
            found = await adapter.find([a.job_name for a in intents])
            for a in intents:
                task = await self.book.load_task(a.task_id)
                if a.job_name in found:  # sbatch ran before the crash: bind, never resubmit
                    a.job_id, a.submitted_at = found[a.job_name], a.created_at
                    async with self.book.store.transaction() as tx:
                        await self.book.save(tx, task, a, at=now)
                elif a.job_name in self.adaptation.dispatcher.in_flight:
                    continue  # being submitted by this process now: never lost
                elif (now - a.created_at).total_seconds() > self.intent_grace_s:
                    await self.adaptation.resubmit_intent(task, a)
        bound = [a for a in atts if a.job_id is not None]
        if not bound:
            return
        live = {ob.job_id: ob for ob in await adapter.status([a.job_id for a in bound if a.job_id])}
        gone = [
            a.job_id
            for a in bound
            if a.job_id and (a.job_id not in live or live[a.job_id].state.terminal)
        ]
        ask = sorted({*gone, *self.unsettled.get(site, {})})
        records = {r.job_id: r for r in await adapter.accounting(ask) if r.array_index is None}
        # A job that left the queue a moment ago may have no final accounting row yet (slurmctld
        # tells slurmdbd a fraction of a second later). Ask again briefly rather than a whole
        # cycle later: this is most of the delay between a job's end and its event.
        just_ended = {
            a.job_id
            for a in bound
            if a.job_id in gone and not a.state.terminal and not _final(records, a.job_id)
        }
        for _ in range(SETTLE_RETRIES):
            if not just_ended:
                break
            await anyio.sleep(SETTLE_PAUSE_S)
            for r in await adapter.accounting(sorted(j for j in just_ended if j)):
                if r.array_index is None:
                    records[r.job_id] = r
            just_ended = {j for j in just_ended if j and not _final(records, j)}
        for a in bound:
            assert a.job_id is not None
            await self._merge(a, live.get(a.job_id), records.get(a.job_id))
        await self._backfill(site, records)

    async def _backfill(self, site: str, records: dict[str, AccountingRecord] | None) -> None:
        """Fill in what a final-but-unsettled row lacked (eligible time, hence the wait) once the
        row settles. Never changes a state and never emits: the outcome was already reported."""
        waiting = self.unsettled.get(site)
        if not waiting:
            return
        if records is None:
            got = await self.adapters[site].accounting(sorted(waiting))
            records = {r.job_id: r for r in got if r.array_index is None}
        now = time.monotonic()
        for job_id, (task_id, n, since) in list(waiting.items()):
            rec = records.get(job_id)
            if rec is not None and rec.settled:
                task = await self.book.load_task(task_id)
                for a in await self.book.load_attempts(task_id):
                    if a.n == n:
                        _times(a, rec)
                        async with self.book.store.transaction() as tx:
                            await self.book.save(tx, task, a, at=self.clock())
            elif now - since < BACKFILL_S:
                continue
            del waiting[job_id]
        if not waiting:
            self.unsettled.pop(site, None)

    async def _merge(
        self, a: AttemptRecord, ob: JobObservation | None, rec: AccountingRecord | None
    ) -> None:
        before = a.state
        if rec is not None and rec.state.terminal and not rec.final:
            rec = None  # no end time yet: decide next cycle
        observed = rec.state if rec is not None else (ob.state if ob is not None else None)
        if observed is None:
            return  # unknown until accounting confirms it
        if observed.terminal and rec is None:
            return  # squeue says done; wait for the final accounting row
        a.state = merge_state(a.state, observed)
        a.native_state = rec.native_state if rec else (ob.native_state if ob else a.native_state)
        if ob is not None and ob.reason:
            a.reason = ob.reason
        if a.state is JobState.PENDING and a.pending_since is None:
            a.pending_since = self.clock()
        if rec is not None:
            _times(a, rec)
            if rec.final and not rec.settled and a.job_id is not None:
                self.unsettled.setdefault(a.site, {})[a.job_id] = (a.task_id, a.n, time.monotonic())
        if a.state == before and rec is None:
            return
        task = await self.book.load_task(a.task_id)
        async with self.book.store.transaction() as tx:
            await self.book.save(tx, task, a, at=self.clock())
        if a.state.terminal and not before.terminal:
            if a.ended_at is not None and a.job_id is not None:
                self.claims.end(Ended(a.site, a.partition, a.ended_at))
                self.wake_placer()  # work held by a per-user limit may go now
            await self.adaptation.after_end(task, a)


def _final(records: dict[str, AccountingRecord], job_id: str | None) -> bool:
    rec = records.get(job_id or "")
    return rec is not None and rec.final


def _times(a: AttemptRecord, rec: AccountingRecord) -> None:
    a.eligible_at, a.started_at, a.ended_at = rec.eligible, rec.start, rec.end
    a.submitted_at = rec.submit or a.submitted_at
    a.wait_s, a.runtime_s, a.exit_code = rec.wait_s, rec.runtime_s, rec.exit_code
