"""Stage-in and stage-out: a task waits for its input transfers before dispatch, and names
its output transfers at submission, so the next task can wait for them at once."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime

import structlog

from fedhpc.domain.config import Site
from fedhpc.domain.envelope import ResourceEnvelope
from fedhpc.domain.job import JobState
from fedhpc.errors import ErrorKind, UsageError
from fedhpc.logs import isolated
from fedhpc.ops.data import StageOut, TransferOptions, TransferProvenance, TransferState
from fedhpc.orchestrator.book import TaskBook
from fedhpc.orchestrator.records import TaskRecord, stage_out_ids
from fedhpc.store import Store
from fedhpc.transfer import records
from fedhpc.transfer.errors import TransferNotFound
from fedhpc.transfer.records import TransferRecord, stage_out_id
from fedhpc.transfer.refs import parse_ref, resolve

__all__ = [
    "StageInFailed",
    "StageInPending",
    "StageInSite",
    "advance",
    "arrival_site",
    "check_envelope",
    "check_staged",
    "consumed_downstream",
    "data_provenance",
    "declared",
    "prepare",
    "waiting",
]

log = structlog.get_logger(__name__)


class StageInFailed(UsageError):
    """A stage_in transfer had already failed when the task was submitted: nothing to wait for."""

    code = "stage_in_failed"
    kind = ErrorKind.CONFLICT  # the transfer exists but is failed: 409, not a usage slip

    def __init__(self, transfer_id: str, rec: TransferRecord) -> None:
        why = f"{rec.error.code}: {rec.error.message}" if rec.error else "failed"
        super().__init__(
            f"stage_in transfer {transfer_id} already failed ({why})",
            hint=" ".join(
                x
                for x in (
                    rec.error.hint if rec.error else "",
                    "Move the data again with move_data, then submit with the new transfer id.",
                )
                if x
            ),
        )


class StageInPending(UsageError):
    """A replan would exclude the one site a waiting task's inputs are copied to."""

    code = "stage_in_pending"
    kind = ErrorKind.CONFLICT

    def __init__(self, task: TaskRecord, site: str) -> None:
        super().__init__(
            f"task {task.id} waits for its input (stage_in {', '.join(task.request.stage_in)}) "
            f"at {site}, and runs only there: excluding {site} leaves it nowhere to run",
            hint=f"Replan without excluding {site}, or cancel it, move_data the input to another "
            "site and submit again with the new transfer id.",
        )


class StageInSite(UsageError):
    """A replan would let a task whose inputs were copied to one site run elsewhere."""

    code = "stage_in_site"
    kind = ErrorKind.CONFLICT

    def __init__(self, task: TaskRecord, site: str, what: str) -> None:
        super().__init__(
            f"task {task.id} runs only at {site}, where its stage-in "
            f"({', '.join(task.request.stage_in)}) copied its inputs: {what}",
            hint=f"Replan without excluding {site}, with a sites_include of [{site}] or none. "
            "To run it elsewhere, cancel it, move_data the inputs there and submit again with "
            "the new transfer ids. The task is unchanged.",
        )


def check_staged(
    task: TaskRecord, site: str, exclude: tuple[str, ...], env: ResourceEnvelope
) -> None:
    """Refuse a replan of a task whose inputs arrived at `site` that would run it elsewhere:
    `site` excluded (by the call or the envelope), or an include naming another site (it
    outranks every exclusion; a site added to the federation after submission is in none)."""
    if site in exclude or site in env.sites_exclude:
        raise StageInSite(task, site, f"excluding {site} leaves it nowhere to run")
    others = sorted(set(env.sites_include) - {site})
    if others:
        raise StageInSite(
            task,
            site,
            f"the envelope's sites_include names {', '.join(others)}, where its inputs are "
            "not (an include outranks every exclusion: it would run there without them)",
        )
    if env.sites_include and site not in env.sites_include:
        raise StageInSite(task, site, f"the envelope's sites_include leaves {site} out")


def waiting(task: TaskRecord) -> bool:
    """Waiting for its stage-in: accepted, never dispatched; `advance` queues it later."""
    return (
        bool(task.request.stage_in)
        and task.state is JobState.SUBMITTED
        and not (task.attempts_made)
    )


def check_envelope(site: str, env: ResourceEnvelope) -> None:
    """Refuse an envelope that rules out `site`, where a task's inputs arrive: placement would
    drop the only site holding them (never run), or an include would outrank the exclusion of
    every other site (run without them). At submission and at a replan while it waits."""
    if site in env.sites_exclude or (env.sites_include and site not in env.sites_include):
        raise UsageError(
            f"the inputs arrive at {site}, which the envelope's sites_include/sites_exclude "
            "rule out",
            hint=f"Allow {site} in the envelope, or move_data the inputs to an allowed site "
            "and pass those transfer ids.",
        )
    others = sorted(set(env.sites_include) - {site})
    if others:
        raise UsageError(
            f"the inputs arrive at {site}, but the envelope's sites_include also names "
            f"{', '.join(others)}: an include outranks the exclusion of every other site, so "
            "the task could run there without its inputs",
            hint=f"Pass sites_include [{site}] (or none: the task runs where its inputs "
            "arrive), or move_data the inputs elsewhere and pass those transfer ids.",
        )


async def arrival_site(store: Store, task: TaskRecord) -> str | None:
    """The one site a task's stage-in delivers to (`prepare` refused several); None without."""
    async with store.transaction() as tx:
        for tid in task.request.stage_in:
            rec = await records.get(tx, tid)
            if rec is not None:
                return rec.destination.site
    return None


def declared(task: TaskRecord) -> bool:
    return bool(task.request.stage_in or task.request.stage_out)


def _stage_out(
    task: TaskRecord, i: int, so: StageOut, sites: Mapping[str, Site], now: datetime
) -> TransferRecord:
    """The output transfer, waiting for the task; its destination resolves now (a typo is the
    caller's error at submission), its source once the task completed somewhere."""
    site = sites.get(parse_ref(so.destination)[0])
    dst = resolve(
        so.destination, sites, need_collection=site is not None and not site.profile.local_test
    )
    return TransferRecord(
        id=stage_out_id(task.id, i),
        idempotency_key=f"{task.id}:stage_out:{i}",
        mode=so.mode,
        source_ref=f"task:{task.id}/{so.source}",
        destination_ref=so.destination,
        source=None,
        destination=dst,
        options=TransferOptions.model_validate(
            so.model_dump(include={"recursive", "sync_level", "verify_checksum"})
        ),
        backend=None,
        state=TransferState.WAITING,
        after_task=task.id,
        source_rel=so.source,
        created_at=now,
        owner=task.owner,  # a stage-out is its task's owner's (service mode)
        trace=(
            f"waits for task {task.id}: {so.source} in its workdir",
            f"destination {so.destination} -> {dst.site}:{dst.path}",
        ),
    )


async def prepare(book: TaskBook, sites: Mapping[str, Site], task: TaskRecord) -> bool:
    """Persist the task's stage-out transfers and register it with its stage-in transfers;
    True when every stage-in already succeeded (dispatch now). The task runs where its inputs
    arrive: every other site is excluded."""
    req, now = task.request, book.clock()
    outs = [_stage_out(task, i, so, sites, now) for i, so in enumerate(req.stage_out)]
    async with book.store.transaction() as tx:
        ins = {tid: await records.get(tx, tid) for tid in req.stage_in}
    missing = sorted(tid for tid, r in ins.items() if r is None)
    if missing:
        raise TransferNotFound(f"stage_in names unknown transfers: {', '.join(missing)}")
    targets = {r.destination.site for r in ins.values() if r is not None}
    if len(targets) > 1:
        raise UsageError(
            f"stage_in transfers deliver to several sites: {sorted(targets)}",
            hint="Stage every input to the one site where the task should run.",
        )
    if targets:
        (site,) = targets
        if req.fixed_site and req.fixed_site != site:
            raise UsageError(
                f"the inputs arrive at {site}, but fixed_site is {req.fixed_site}",
                hint=f"Drop fixed_site (the task runs where its inputs arrive), or move_data "
                f"them to {req.fixed_site} and pass those transfer ids.",
            )
        check_envelope(site, req.envelope)
        # Every site but that one, known now, is excluded; `data_site` also rules out a site
        # added to the federation later (placement and replan read it).
        task.excluded_sites = tuple(sorted(set(sites) - {site}))
        task.data_site = site
        task.decision = f"waiting for stage-in {', '.join(req.stage_in)} (runs on {site})"
    async with book.store.transaction() as tx:
        # Re-read in the transaction that registers the task as a waiter: a transfer that
        # failed before it had a waiter already raised its own event (transfer.failed), so the
        # task is refused here rather than failed later with a second event for one failure.
        for tid in req.stage_in:
            rec = await records.get(tx, tid)
            if rec is not None and rec.state is TransferState.FAILED:
                raise StageInFailed(tid, rec)
        await book.save(tx, task, at=now)
        if req.continuation is not None:  # with the waiter: its stage-in events find it
            await book.put_continuation(tx, task.id, req.continuation)
        for out in outs:
            await records.put(tx, out, at=now)
        for tid in req.stage_in:
            rec = await records.get(tx, tid)
            if rec is not None and task.id not in rec.awaited_by:
                rec.awaited_by = (*rec.awaited_by, task.id)
                await records.put(tx, rec, at=now)
    return all(r is not None and r.state is TransferState.SUCCEEDED for r in ins.values())


async def advance(book: TaskBook, wake_placer: Callable[[], None]) -> None:
    """Each cycle: dispatch tasks whose stage-in succeeded; end those whose stage-in failed
    (one exception event, unless the producing task's own event already said why); tell the
    agent of a task whose stage-in waits for a person (once per block)."""
    for row in await book.store.list_tasks(state=JobState.SUBMITTED.value, limit=100_000):
        with isolated("stage-in check failed", task=row["id"]):  # this task's, not the others'
            body = row["body"]
            if not body["request"].get("stage_in") or body.get("attempts_made"):
                continue
            await _advance_one(book, TaskRecord.model_validate(body), wake_placer)


async def _advance_one(book: TaskBook, task: TaskRecord, wake_placer: Callable[[], None]) -> None:
    async with book.store.transaction() as tx:
        ins = [await records.get(tx, tid) for tid in task.request.stage_in]
    failed = [r for r in ins if r is None or r.state is TransferState.FAILED]
    if failed:
        await _fail(book, task, failed[0], task.request.stage_in[ins.index(failed[0])])
    elif all(r is not None and r.state is TransferState.SUCCEEDED for r in ins):
        log.info("stage-in done, queued for placement", task=task.id)
        task.state = JobState.QUEUED  # the placer dispatches it, like any accepted task
        async with book.store.transaction() as tx:
            await book.save(tx, task, at=book.clock())
        wake_placer()
    else:
        await _blocked(book, task, ins)


async def _blocked(book: TaskBook, task: TaskRecord, ins: list[TransferRecord | None]) -> None:
    """A stage-in blocked on credentials or consent: the task waits (it runs once a person
    fixed it), and its agent hears why, with the transfer's hint (e.g. `fedhpc login ...`).
    Keyed per block, so each block is told once, however many cycles it lasts."""
    for rec in ins:
        if rec is None or rec.blocked is None or rec.state.terminal:
            continue
        reason = (
            f"stage-in {rec.id} is blocked: {rec.blocked.code}: {rec.blocked.message}; "
            "the task waits for it"
        )
        async with book.store.transaction() as tx:
            await book.emit(
                tx,
                "task.stage_in_blocked",
                task,
                key=f"{rec.id}:{rec.blocks}",
                transfer_id=rec.id,
                reason=reason,
                hint=rec.blocked.hint or None,
            )


async def _fail(book: TaskBook, task: TaskRecord, rec: TransferRecord | None, tid: str) -> None:
    err = rec.error if rec is not None else None
    why = f"{err.code}: {err.message}" if err else "the transfer is gone"
    task.state = JobState.FAILED
    task.reasons = (f"stage-in {tid} failed: {why}",)
    async with book.store.transaction() as tx:
        await book.save(tx, task, at=book.clock())
        if rec is None or rec.cause != "upstream":
            await book.emit(
                tx,
                "task.stage_in_failed",
                task,
                transfer_id=tid,
                reason=task.reasons[0],
                hint=err.hint if err else None,
            )


async def consumed_downstream(store: Store, task: TaskRecord) -> bool:
    """Does a task already wait for this task's outputs? Then its completion is routine: the
    next task's outcome is the event that matters."""
    if not task.request.stage_out:
        return False
    async with store.transaction() as tx:
        outs = [await records.get(tx, tid) for tid in stage_out_ids(task)]
    return any(r is not None and r.awaited_by for r in outs)


async def data_provenance(store: Store, task: TaskRecord) -> tuple[TransferProvenance, ...]:
    """The task's inputs and outputs for its manifest: sites, paths, transfer ids, checksums."""
    if not declared(task):
        return ()
    out: list[TransferProvenance] = []
    async with store.transaction() as tx:
        for direction, ids in (
            ("stage_in", task.request.stage_in),
            ("stage_out", stage_out_ids(task)),
        ):
            for tid in ids:
                rec = await records.get(tx, tid)
                if rec is not None:
                    out.append(rec.provenance(direction))
    return tuple(out)
