"""One control cycle: observe every active attempt (one status call per site, accounting for
the jobs that left the queue), merge monotonically, and adapt within each task's budgets."""

from __future__ import annotations

import time
from collections import defaultdict

import anyio
import structlog

from fedhpc.adapters.transports.base import TransportError
from fedhpc.domain.job import ACTIVE, AccountingRecord, JobObservation, JobState, merge_state
from fedhpc.orchestrator import estimates, staging
from fedhpc.orchestrator.records import AttemptRecord, TaskRecord
from fedhpc.orchestrator.service import Ended, Orchestrator
from fedhpc.placement import Placement

__all__ = ["cancel_attempt", "replace_if_better", "tick"]

log = structlog.get_logger(__name__)

_ACTIVE = tuple(sorted(s.value for s in ACTIVE))  # the store's attempt states to watch


async def tick(o: Orchestrator) -> None:
    """Observe, then adapt. Holds the orchestrator's lock: one writer at a time. Outside it,
    now and then, the user's jobs from each site's accounting (the learned wait estimator)."""
    o.count_cycle()
    try:
        await estimates.learn_from_accounting(o)
    except Exception:  # estimates only: never stalls the cycle
        log.exception("reading the user's accounting failed")
    async with o.lock:
        rows = await o.store.attempts_in(_ACTIVE)
        by_site: dict[str, list[AttemptRecord]] = defaultdict(list)
        for row in rows:
            by_site[row["site"]].append(AttemptRecord.from_row(row))
        for site, atts in sorted(by_site.items()):
            if o.offline(site):
                await _site_lost(o, site, atts)
                continue
            if not o.online(site):
                continue  # not probed yet: nothing to conclude
            try:
                await _observe(o, site, atts)
            except TransportError as exc:
                log.warning("observe failed", site=site, error=exc.message)
            except Exception:  # one site's bad answer must not stall the others
                log.exception("observe failed", site=site)
        for site in [s for s in o.unsettled if s not in by_site and o.online(s)]:
            try:
                await _backfill(o, site, None)
            except Exception:  # accounting details only: never stalls the cycle
                log.exception("accounting backfill failed", site=site)
        o.new_cycle()  # this cycle's finished attempts join the wait history, built once
        await _adapt_pending(o)
        await staging.advance(o)  # dispatch tasks whose stage-in succeeded
        from fedhpc.orchestrator.groups import advance_groups

        await advance_groups(o)
    o.notify()


async def _observe(o: Orchestrator, site: str, atts: list[AttemptRecord]) -> None:
    adapter = o.adapters[site]
    now = o.clock()
    intents = [a for a in atts if a.job_id is None]
    if intents:
        found = await adapter.find([a.job_name for a in intents])
        for a in intents:
            task = await o.load_task(a.task_id)
            if a.job_name in found:  # sbatch ran before the crash: bind, never resubmit
                a.job_id, a.submitted_at = found[a.job_name], a.created_at
                async with o.store.transaction() as tx:
                    await o.save(tx, task, a, at=now)
            elif (now - a.created_at).total_seconds() > o.INTENT_GRACE_S:
                await _resubmit_intent(o, task, a)
    bound = [a for a in atts if a.job_id is not None]
    if not bound:
        return
    live = {ob.job_id: ob for ob in await adapter.status([a.job_id for a in bound if a.job_id])}
    gone = [
        a.job_id
        for a in bound
        if a.job_id and (a.job_id not in live or live[a.job_id].state.terminal)
    ]
    ask = sorted({*gone, *o.unsettled.get(site, {})})
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
        await _merge(o, a, live.get(a.job_id), records.get(a.job_id))
    await _backfill(o, site, records)


SETTLE_RETRIES = 4
SETTLE_PAUSE_S = 0.2
BACKFILL_S = 120.0  # how long to wait for slurmdbd to complete a final row


def _final(records: dict[str, AccountingRecord], job_id: str | None) -> bool:
    rec = records.get(job_id or "")
    return rec is not None and rec.final


async def _backfill(
    o: Orchestrator, site: str, records: dict[str, AccountingRecord] | None
) -> None:
    """Fill in what a final-but-unsettled row lacked (eligible time, hence the wait) once the
    row settles. Never changes a state and never emits: the outcome was already reported."""
    waiting = o.unsettled.get(site)
    if not waiting:
        return
    if records is None:
        got = await o.adapters[site].accounting(sorted(waiting))
        records = {r.job_id: r for r in got if r.array_index is None}
    now = time.monotonic()
    for job_id, (task_id, n, since) in list(waiting.items()):
        rec = records.get(job_id)
        if rec is not None and rec.settled:
            task = await o.load_task(task_id)
            for a in await o.load_attempts(task_id):
                if a.n == n:
                    _times(a, rec)
                    async with o.store.transaction() as tx:
                        await o.save(tx, task, a, at=o.clock())
        elif now - since < BACKFILL_S:
            continue
        del waiting[job_id]
    if not waiting:
        o.unsettled.pop(site, None)


def _times(a: AttemptRecord, rec: AccountingRecord) -> None:
    a.eligible_at, a.started_at, a.ended_at = rec.eligible, rec.start, rec.end
    a.submitted_at = rec.submit or a.submitted_at
    a.wait_s, a.runtime_s, a.exit_code = rec.wait_s, rec.runtime_s, rec.exit_code


async def _resubmit_intent(o: Orchestrator, task: TaskRecord, a: AttemptRecord) -> None:
    """The intent was written but the scheduler never saw the job: submit it now, same name."""
    log.info("resubmitting lost intent", task=task.id, attempt=a.n)
    task.attempts_made = a.n - 1
    decision = await o.decide(task)
    if isinstance(decision, Placement) and (decision.site, decision.partition) == (
        a.site,
        a.partition,
    ):
        await o.dispatch(task, decision)
        return
    a.state, a.reason, a.ended_at = JobState.FAILED, "never reached the scheduler", o.clock()
    async with o.store.transaction() as tx:
        await o.save(tx, task, a, at=o.clock())
    await _after_end(o, task, a)


async def _merge(
    o: Orchestrator, a: AttemptRecord, ob: JobObservation | None, rec: AccountingRecord | None
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
        a.pending_since = o.clock()
    if rec is not None:
        _times(a, rec)
        if rec.final and not rec.settled and a.job_id is not None:
            o.unsettled.setdefault(a.site, {})[a.job_id] = (a.task_id, a.n, time.monotonic())
    if a.state == before and rec is None:
        return
    task = await o.load_task(a.task_id)
    async with o.store.transaction() as tx:
        await o.save(tx, task, a, at=o.clock())
    if a.state.terminal and not before.terminal:
        if a.ended_at is not None and a.job_id is not None:
            o.ended.append(Ended(a.site, a.partition, a.ended_at))
            o.placer_wake.set()  # work held by a per-user limit may go now
        await _after_end(o, task, a)


async def _after_end(o: Orchestrator, task: TaskRecord, a: AttemptRecord) -> None:
    """An attempt ended: accept it, retry, extend, or end the task with one event."""
    if task.state.terminal:
        return
    if a.state is JobState.COMPLETED:
        await _accept(o, task, a)
        return
    if a.superseded:
        return
    budget = task.request.adaptation
    if a.state is JobState.TIMEOUT and task.extensions_used < budget.max_wall_extensions:
        cap = o.sites[a.site].profile.partition(a.partition).max_wall_s
        longer = min(int(a.shape.wall_time_s * budget.wall_factor), cap)
        if longer > a.shape.wall_time_s:
            task.extensions_used += 1
            decision = await o.decide(task, wall_s=longer)
            if isinstance(decision, Placement):
                await o.dispatch(task, decision)
                return
    if a.state in (JobState.FAILED, JobState.UNSCHEDULABLE) and (
        task.retries_used < budget.max_retries
    ):
        task.retries_used += 1
        exclude = (a.site,) if a.state is JobState.UNSCHEDULABLE else ()
        decision = await o.decide(task, exclude=exclude)
        if isinstance(decision, Placement):
            await o.dispatch(task, decision)
            return
    task.state = JobState.CANCELLED if a.state is JobState.CANCELLED else a.state
    task.reasons = (f"attempt {a.n} on {a.site}: {a.native_state or a.state.value}"
                    + (f" (exit {a.exit_code})" if a.exit_code else ""),)  # fmt: skip
    kind = "task.terminal" if a.state is JobState.CANCELLED else "task.retry_exhausted"
    async with o.store.transaction() as tx:
        await o.save(tx, task, at=o.clock())
        await o.emit(tx, kind, task, site=a.site, attempt=a.n, job_id=a.job_id,
                     reason=task.reasons[0], retries=task.retries_used,
                     extensions=task.extensions_used)  # fmt: skip


async def _accept(o: Orchestrator, task: TaskRecord, a: AttemptRecord) -> None:
    """The first completed attempt is the result; every other live attempt is cancelled."""
    task.state, task.accepted_attempt = JobState.COMPLETED, a.n
    others = [x for x in await o.load_attempts(task.id) if x.n != a.n and not x.state.terminal]
    for x in others:
        x.superseded = True
        await cancel_attempt(o, x)
    quiet = await staging.consumed_downstream(o, task)  # the next task's outcome will report
    async with o.store.transaction() as tx:
        await o.save(tx, task, *others, at=o.clock())
        if task.group_id is None and not quiet:  # a group's children report once, as the round
            await o.emit(tx, "task.terminal", task, site=a.site, attempt=a.n, job_id=a.job_id,
                         wait_s=a.wait_s, runtime_s=a.runtime_s)  # fmt: skip


async def cancel_attempt(o: Orchestrator, a: AttemptRecord) -> None:
    """Cancel now if the site answers, else when it does."""
    if a.job_id is None or not o.online(a.site):
        a.cancel_pending = True
        return
    try:
        await o.adapters[a.site].cancel([a.job_id])
        a.cancel_pending = False
    except Exception as exc:  # the scheduler may already have finished it
        log.info("cancel failed", site=a.site, job_id=a.job_id, error=str(exc))
        a.cancel_pending = True


async def _site_lost(o: Orchestrator, site: str, atts: list[AttemptRecord]) -> None:
    """The site is offline: move its queued work elsewhere within each task's re-placement
    budget; running jobs keep their chance. Work that stays there (running, nowhere else to
    go, or the budget spent) wakes the agent once per attempt, after `site_lost_after_s`."""
    went = await o.store.last_event("site.offline", site)
    lost_s = (o.clock() - went.created_at).total_seconds() if went is not None else 0.0
    stuck: dict[str, list[str]] = {}  # group -> its children that stay on the lost site
    for a in atts:
        if a.superseded:
            continue
        task = await o.load_task(a.task_id)
        if task.state.terminal:
            continue
        why = "its job was running there and may still be"
        if a.state is not JobState.RUNNING:
            why = "no re-placement left in its adaptation budget"
            if task.replacements_used < task.request.adaptation.max_replacements:
                decision = await o.decide(task, exclude=(a.site,))
                if isinstance(decision, Placement):
                    task.replacements_used += 1
                    a.superseded, a.cancel_pending = True, True
                    a.reason = f"re-placed: {a.site} offline"
                    async with o.store.transaction() as tx:
                        await o.save(tx, task, a, at=o.clock())
                    await o.dispatch(task, decision)
                    log.info("re-placed from lost site", task=task.id, old=a.site,
                             new=decision.site)  # fmt: skip
                    continue
                why = f"no other site fits: {decision.hint}"
        if lost_s < o.site_lost_after_s:
            continue
        reason = f"{a.site} offline for {lost_s:.0f}s; attempt {a.n}: {why}"
        async with o.store.transaction() as tx:
            await o.emit(tx, "task.site_lost", task, key=f"{a.n}", site=a.site, attempt=a.n,
                         job_id=a.job_id, attempt_state=a.state.value, reason=reason)  # fmt: skip
        if task.group_id:
            stuck.setdefault(task.group_id, []).append(task.id)
    outage = went.seq if went is not None else 0
    for gid, children in stuck.items():
        await _group_site_lost(o, gid, site, children, lost_s=lost_s, outage=outage)


_LOST_IDS = 20  # task ids named in one group.site_lost; the group resource lists them all


async def _group_site_lost(o: Orchestrator, gid: str, site: str, children: list[str], *,
                           lost_s: float, outage: int) -> None:  # fmt: skip
    """A group's continuation hears its children's lost site once per outage, as one event
    (it hears no per-child events): how many stay there, which, and what it can do."""
    reason = (f"{site} offline for {lost_s:.0f}s: {len(children)} children of the group stay "
              "there (running, or nowhere else to go)")  # fmt: skip
    async with o.store.transaction() as tx:
        await tx.append_event(
            "group.site_lost", gid,
            {"group_id": gid, "site": site, "children": len(children),
             "task_ids": children[:_LOST_IDS], "reason": reason,
             "result": f"fedhpc://groups/{gid}"},
            at=o.clock(), key=f"group.site_lost:{gid}:{site}:{outage}",
        )  # fmt: skip


async def _adapt_pending(o: Orchestrator) -> None:
    """Supersede cancels owed to returning sites; move long-pending attempts when another
    placement finishes sooner by the task's margin."""
    now = o.clock()
    for row in await o.store.attempts_in(_ACTIVE):
        a = AttemptRecord.from_row(row)
        if a.superseded:
            if a.cancel_pending and o.online(a.site):
                await cancel_attempt(o, a)
                task = await o.load_task(a.task_id)
                async with o.store.transaction() as tx:
                    await o.save(tx, task, a, at=now)
            continue
        task = await o.load_task(a.task_id)
        budget = task.request.adaptation
        if (
            a.state is not JobState.PENDING
            or not budget.replace_pending
            or task.replacements_used >= budget.max_replacements
            or a.pending_since is None
            or (now - a.pending_since).total_seconds() < budget.replace_after_s
        ):
            continue
        await replace_if_better(o, task, a, margin_s=budget.replace_margin_s)


async def replace_if_better(
    o: Orchestrator, task: TaskRecord, a: AttemptRecord, *, margin_s: float
) -> bool:
    """Re-place a pending attempt when the best placement now beats staying by `margin_s`."""
    decision = await o.decide(task, score=((a.site, a.partition),))  # staying, scored
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
    await cancel_attempt(o, a)
    async with o.store.transaction() as tx:
        await o.save(tx, task, a, at=o.clock())
    await o.dispatch(task, decision)
    log.info("re-placed pending", task=task.id, old=a.site, new=decision.site)
    return True
