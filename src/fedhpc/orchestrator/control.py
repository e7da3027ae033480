"""Observation in each control cycle, every site at once and each on its own: its scheduler is
asked without the orchestrator's lock (`find` for intents, one status call, accounting for the
jobs that left the queue), and what it said is merged monotonically under the lock as soon as
it answers, into the attempts as stored then. A slow or dead site delays only its own
attempts. An attempt that ended goes to `Adaptation`, work on an offline site to its
`site_lost`."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import anyio
import structlog

from fedhpc.adapters.dialects.busy import SchedulerBusy
from fedhpc.adapters.liveness import PING_TIMEOUT_S, ControllerSilent, suspect_ping_s
from fedhpc.adapters.site import SiteAdapter
from fedhpc.adapters.transports.base import TransportError
from fedhpc.collector import Collector
from fedhpc.domain.job import AccountingRecord, JobObservation, JobState, merge_state
from fedhpc.globus_auth.people import PersonNotAuthorized, acting_for
from fedhpc.logs import isolated
from fedhpc.orchestrator.adapt import ACTIVE_STATES, Adaptation
from fedhpc.orchestrator.array_leftovers import ArrayLeftovers
from fedhpc.orchestrator.book import TaskBook
from fedhpc.orchestrator.claims import Claims, Ended
from fedhpc.orchestrator.finish import finish_ends
from fedhpc.orchestrator.hedging import outrun
from fedhpc.orchestrator.liveness import offline, online
from fedhpc.orchestrator.observed import alone as _alone
from fedhpc.orchestrator.observed import copy_times as _times
from fedhpc.orchestrator.observed import final as _final
from fedhpc.orchestrator.observed import intent_job as _found  # the names tests know
from fedhpc.orchestrator.people import by_owner, per_person
from fedhpc.orchestrator.records import AttemptRecord
from fedhpc.orchestrator.suspect import hedge_suspect

__all__ = ["Control"]

log = structlog.get_logger(__name__)

SETTLE_RETRIES = 4
SETTLE_PAUSE_S = 0.2
BACKFILL_S = 120.0  # how long to wait for slurmdbd to complete a final row


@dataclass
class _Answer:
    """What one site's scheduler said in a cycle, asked without the lock, about `asked` (its
    active attempts then): job ids found by name for the intents (`found_at`: when find was
    asked; None when it was not), squeue's rows, and sacct's for the jobs that left the queue
    and for those whose final row had not settled. `busy`: intents being submitted then."""

    asked: list[AttemptRecord]
    busy: frozenset[str] = frozenset()
    found: dict[str, str] = field(default_factory=dict)
    found_at: datetime | None = None
    live: dict[str, JobObservation] = field(default_factory=dict)
    records: dict[str, AccountingRecord] = field(default_factory=dict)


class Control:
    """Observes attempts at their sites and records what the schedulers say; `lock` is the
    orchestrator's, held for the merge and never for a scheduler call."""

    def __init__(
        self,
        book: TaskBook,
        collector: Collector,
        adapters: Mapping[str, SiteAdapter],
        adaptation: Adaptation,
        claims: Claims,
        *,
        lock: anyio.Lock,
        wake_placer: Callable[[], None],
        clock: Callable[[], datetime],
        intent_grace_s: float,
        cycle_s: float = 10.0,
        ping_timeout_s: float = PING_TIMEOUT_S,
    ) -> None:
        self.book = book
        self.collector = collector
        self.adapters = adapters
        for adapter in adapters.values():  # a hung controller suspected within half a cycle
            adapter.observe_ping_s = suspect_ping_s(cycle_s, ping_timeout_s)
        self.adaptation = adaptation
        self.dispatcher = adaptation.dispatcher
        self.claims = claims
        self.lock = lock
        self.wake_placer = wake_placer  # work held by a per-user limit may go now
        self.clock = clock
        # An intent (attempt written, job id unknown) younger than this may still be in sbatch:
        # only older intents that the scheduler does not know are submitted again.
        self.intent_grace_s = intent_grace_s
        # When this process began to lead: an intent another process wrote (a leader killed
        # mid-submit) may have a scheduler command of that process still running, whatever its
        # age, so the grace counts from here for it.
        self.leading_since: datetime | None = None
        self.leftovers = ArrayLeftovers(adapters)  # ended array elements' scheduler files
        # Hedged copies a started copy outran in a merge, their cancels sent after the lock.
        self.outrun: list[AttemptRecord] = []
        # site -> job id -> (task id, attempt n, monotonic time): attempts that ended on a final
        # but not yet settled accounting row; their eligible time is filled in when it settles.
        self.unsettled: dict[str, dict[str, tuple[str, int, float]]] = {}

    async def finish_ends(self) -> int:
        """Under the lock, once this process leads: the ends a killed leader left half-done,
        taken through (`finish.finish_ends`); the count of them."""
        return await finish_ends(self.book, self.adaptation)

    async def observe(self) -> None:
        """Observe every active attempt, all sites concurrently; one site's failure or
        slowness is its own (each scheduler command is bounded by FEDHPC_COMMAND_TIMEOUT_S).
        Call it without the lock: each site takes it to merge what it said."""
        by_site: dict[str, list[AttemptRecord]] = defaultdict(list)
        for row in await self.book.store.attempts_in(ACTIVE_STATES):
            with isolated("unreadable attempt", task=row["task_id"], attempt=row["n"]):
                by_site[row["site"]].append(AttemptRecord.from_row(row))
        sites = {*by_site, *(s for s in self.unsettled if self.unsettled[s])}
        async with anyio.create_task_group() as tg:
            for site in sorted(sites):
                tg.start_soon(self._site, site, by_site.get(site, []), name=f"observe:{site}")

    async def _site(self, site: str, atts: list[AttemptRecord]) -> None:
        """One site's observation: asked, then merged; or its work handed to `site_lost`."""
        try:
            if offline(self.collector, site):
                if atts:
                    async with self.lock:
                        await self.adaptation.site_lost(site, await self._stored(site))
            elif online(self.collector, site) and self.adapters[site].observe_due():
                answer = await self._ask_unless_lost(site, atts)
                self.adapters[site].observe_answered()
                async with self.lock:
                    if answer is not None:
                        self.adaptation.planner.suspects.clear(site)  # it answered
                        await self._merge_site(site, answer)
                    elif atts:  # lost while asked (a hung controller): its work moves now
                        await self.adaptation.site_lost(site, await self._stored(site))
                await self.leftovers.clear(site)
        except Exception as caught:  # one site's bad answer must not stall the others
            exc = _alone(caught)
            if isinstance(exc, SchedulerBusy):  # rate-limited: asked less often, not lost
                wait = self.adapters[site].observe_refused()
                log.warning(
                    "observe refused: backing off", site=site, seconds=wait, error=exc.message
                )
            elif isinstance(exc, TransportError):
                log.warning("observe failed", site=site, error=exc.message)
                self.collector.probe_soon(site)  # a dead site is known as such within one probe
                if isinstance(exc, ControllerSilent) and atts:  # suspect: its queue hedged
                    async with self.lock:
                        await hedge_suspect(
                            self.adaptation, site, await self._stored(site), exc.message
                        )
            else:
                log.exception("observe failed", site=site)
                self.collector.probe_soon(site)
        losers, self.outrun = self.outrun, []
        await self.adaptation.cancels.send(losers)  # the moment a copy started, not a cycle on
        await self.dispatcher.send_later()  # its retries and re-placements, without the lock

    async def _stored(self, site: str) -> list[AttemptRecord]:
        """The site's active attempts as stored now (under the lock)."""
        out = []
        for row in await self.book.store.attempts_in(ACTIVE_STATES, site=site):
            with isolated("unreadable attempt", task=row["task_id"], attempt=row["n"]):
                out.append(AttemptRecord.from_row(row))
        return out

    async def _ask_unless_lost(self, site: str, atts: list[AttemptRecord]) -> _Answer | None:
        """`_ask`, abandoned (None) if the collector stores the site offline meanwhile: a
        hung controller's ping or squeue must not hold the cycle (and the move of its work)
        until its deadline. Only reads are abandoned: nothing was changed at the site."""
        answer: _Answer | None = None
        failed: Exception | None = None  # raised as itself, never inside an ExceptionGroup
        async with anyio.create_task_group() as tg:

            async def ask() -> None:
                nonlocal answer, failed
                try:
                    answer = await self._ask(site, atts)
                except Exception as exc:  # re-raised below as itself
                    failed = exc
                tg.cancel_scope.cancel()

            async def lost() -> None:
                await self.collector.stored_offline(site)
                log.warning("site lost while observed: observation abandoned", site=site)
                tg.cancel_scope.cancel()

            tg.start_soon(ask)
            tg.start_soon(lost)
            tg.start_soon(self._watch, site)
        if failed is not None:
            raise failed
        return answer

    async def _watch(self, site: str) -> None:
        """An observation still out after its ping's deadline (the controller hung after its
        ping answered, say): the ping alone, beside it; silent, the site is suspect now."""
        adapter = self.adapters[site]
        await anyio.sleep(adapter.observe_ping_s)
        with isolated("watching a slow observation failed", site=site):
            found = await adapter.ping_alone(adapter.observe_ping_s)
            if found is not None:
                self.collector.probe_soon(site)
            if isinstance(found, ControllerSilent):
                async with self.lock:
                    why = found.message
                    await hedge_suspect(self.adaptation, site, await self._stored(site), why)
                await self.dispatcher.send_later()

    async def _ask(self, site: str, atts: list[AttemptRecord]) -> _Answer:
        """`_ask_as`; at a per-person site once per person, as that person (service mode). A
        person without a usable authorization leaves their jobs unobserved (not asked, so
        not taken for gone) until they sign in again; the others' are observed."""
        if not per_person(self.collector.sites.get(site)):
            return await self._ask_as(site, atts)
        whole = _Answer(asked=[])
        groups = await by_owner(self.book, atts)
        # Ended jobs whose accounting is asked for again go with their own person's, too.
        waiting: dict[str | None, list[str]] = {}
        for job_id, (task_id, _, _) in self.unsettled.get(site, {}).items():
            owner = (await self.book.load_task(task_id)).owner
            waiting.setdefault(owner, []).append(job_id)
            groups.setdefault(owner, [])
        for owner, some in groups.items():
            try:
                with acting_for(owner):
                    part = await self._ask_as(site, some, waiting.get(owner, []))
            except PersonNotAuthorized as exc:
                log.info("jobs unobserved", site=site, jobs=len(some), reason=exc.message)
                continue
            whole.asked += part.asked
            whole.busy |= part.busy
            whole.found_at = min(filter(None, (whole.found_at, part.found_at)), default=None)
            whole.found.update(part.found)
            whole.live.update(part.live)
            whole.records.update(part.records)
        return whole

    async def _ask_as(
        self, site: str, atts: list[AttemptRecord], unsettled: Sequence[str] | None = None
    ) -> _Answer:
        """Without the lock: what the site's scheduler says about `atts` (and the accounting
        of `unsettled` jobs, by default all the site's)."""
        adapter = self.adapters[site]
        answer = _Answer(asked=atts, busy=frozenset(self.dispatcher.in_flight))
        # An array's members are found by the array's name (one lookup for them all).
        intents = sorted(
            {a.array_name or a.job_name for a in atts if a.job_id is None}
            - {a.array_name or a.job_name for a in atts if a.job_name in answer.busy}
        )
        if intents:
            answer.found_at = self.clock()  # before find: the age it can vouch for
            answer.found = await adapter.find(intents)
        bound = [a for a in atts if a.job_id is not None]
        if bound:
            # An array element is asked as its array (one id for all of them) and found by its
            # own id (`key`: Slurm's A_i), as any other job by its id.
            ids = sorted({adapter.parent_id(a.job_id) for a in bound if a.job_id})
            answer.live = {ob.key: ob for ob in await adapter.status(ids)}
        live = answer.live
        gone = {a.job_id for a in bound if a.job_id not in live or live[a.job_id].state.terminal}
        if unsettled is None:
            unsettled = list(self.unsettled.get(site, {}))
        ask = sorted({adapter.parent_id(j) for j in (*gone, *unsettled) if j})
        records = {r.key: r for r in await adapter.accounting(ask)}
        # A job that left the queue a moment ago may have no final accounting row yet (slurmctld
        # tells slurmdbd a fraction of a second later). Ask again briefly rather than a whole
        # cycle later: most of the delay between a job's end and its event. Not for an array's
        # elements: a sweep ends some every cycle, and each read is of the whole array.
        just_ended = {
            j
            for a in bound
            if (j := a.job_id) in gone and not a.state.terminal and not _final(records, j)
            if j is not None and adapter.parent_id(j) == j
        }
        for _ in range(SETTLE_RETRIES):
            if not just_ended:
                break
            await anyio.sleep(SETTLE_PAUSE_S)
            for r in await adapter.accounting(
                sorted({adapter.parent_id(j) for j in just_ended if j})
            ):
                records[r.key] = r
            just_ended = {j for j in just_ended if j and not _final(records, j)}
        answer.records = records
        return answer

    async def _merge_site(self, site: str, answer: _Answer) -> None:
        """Under the lock: `answer` merged into the site's attempts as stored now. One that
        ended, was superseded or got its job id meanwhile is taken as it is now; the merge is
        monotonic, so an answer older than what is stored never moves an attempt back."""
        stored = {(a.task_id, a.n): a for a in await self._stored(site)}
        merged: set[str] = set()  # tasks one of whose attempts was merged in this loop
        for asked in answer.asked:
            a = stored.get((asked.task_id, asked.n))
            if a is None:
                continue  # no longer active: its end was recorded meanwhile
            if a.task_id in merged:  # a sibling's merge may have changed it (a hedged copy)
                a = next((x for x in await self.book.load_attempts(a.task_id) if x.n == a.n), a)
            merged.add(a.task_id)
            with isolated("observing an attempt failed", task=a.task_id, attempt=a.n):
                if asked.job_id is None:
                    await self._intent(a, answer)
                elif a.job_id == asked.job_id:
                    await self._merge(a, answer.live.get(a.job_id), answer.records.get(a.job_id))
        await self._backfill(site, answer.records)

    async def _intent(self, a: AttemptRecord, answer: _Answer) -> None:
        """An intent when the site was asked: bound to the job found by its name (sbatch ran
        before a crash: never resubmitted), or submitted again when the scheduler does not know
        it and it was written (or this process began to lead, if later) longer than the grace
        before find was asked."""
        if a.job_id is not None or answer.found_at is None:
            return  # bound meanwhile (its submission's outcome), or not asked about
        if a.job_name in answer.busy or a.job_name in self.dispatcher.in_flight:
            return  # being submitted by this process: never lost
        task = await self.book.load_task(a.task_id)
        found = _found(a, answer.found, self.adapters[a.site])
        if found is not None:
            a.job_id, a.submitted_at = found, a.created_at
            async with self.book.store.transaction() as tx:
                await self.book.save(tx, task, a, at=self.clock())
            return
        since = max(a.created_at, self.leading_since or a.created_at)
        if (answer.found_at - since).total_seconds() > self.intent_grace_s:
            await self.adaptation.resubmit_intent(task, a)

    async def _backfill(self, site: str, records: dict[str, AccountingRecord]) -> None:
        """Fill in what a final-but-unsettled row lacked (eligible time, hence the wait) once the
        row settles. Never changes a state and never emits: the outcome was already reported."""
        waiting = self.unsettled.get(site)
        if not waiting:
            return
        now = time.monotonic()
        for job_id, (task_id, n, since) in list(waiting.items()):
            rec = records.get(job_id)
            if rec is not None and rec.settled:
                with isolated("accounting backfill failed", task=task_id, attempt=n):
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
        losers: list[AttemptRecord] = []
        if a.state is JobState.RUNNING and before is not JobState.RUNNING:
            # The first hedged copy to start runs: the others are set aside with its start, in
            # one transaction, and cancelled right after the lock.
            losers = await outrun(self.book, task, a, self.adaptation.cancels.owe)
        async with self.book.store.transaction() as tx:
            await self.book.save(tx, task, a, *losers, at=self.clock())
        self.outrun += losers
        if a.state.terminal and not before.terminal:
            self.leftovers.note(a)
            if a.ended_at is not None and a.job_id is not None:
                self.claims.end(Ended(a.site, a.partition, a.ended_at))
                self.wake_placer()  # work held by a per-user limit may go now
            await self.adaptation.after_end(task, a)
