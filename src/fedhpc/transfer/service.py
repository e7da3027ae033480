"""The transfer service: durable transfers in the store, submitted under persisted submission
ids, polled every cycle, with events only where someone has a decision to make."""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import structlog

from fedhpc.adapters.site import SiteAdapter
from fedhpc.domain.config import Site
from fedhpc.domain.job import TERMINAL
from fedhpc.errors import FedError
from fedhpc.globus_auth.people import acting_for
from fedhpc.ops.data import (
    MoveDataRequest,
    TransferHandle,
    TransferIssue,
    TransferOptions,
    TransferRequest,
    TransferState,
    TransferView,
)
from fedhpc.store import Store
from fedhpc.store.continuations import put_continuation
from fedhpc.transfer import events, records
from fedhpc.transfer.backend import TransferBackend, TransferSpec
from fedhpc.transfer.errors import (
    KeyConflict,
    TransferNotFound,
    TransferUnavailable,
    upstream_hint,
)
from fedhpc.transfer.plan import plan_transfer, request_key
from fedhpc.transfer.records import TransferRecord
from fedhpc.transfer.refs import choose_backend, locate, runs_as
from fedhpc.transfer.site_roots import RootExpander

__all__ = ["TransferService"]

log = structlog.get_logger(__name__)

_LIVE = (TransferState.WAITING, TransferState.QUEUED, TransferState.ACTIVE)
_ENDED = frozenset(state.value for state in TERMINAL)  # a task that will run no more


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _asks(req: MoveDataRequest | TransferRecord) -> tuple[object, ...]:
    """What a move_data request (or the transfer it made) asks for: not who waits for it."""
    if isinstance(req, TransferRecord):
        return (req.mode, req.source_ref, req.destination_ref, req.label, _options(req.options))
    return (req.mode, req.source, req.destination, req.label or "", _options(req))


def _options(opts: TransferOptions) -> dict[str, Any]:
    return opts.model_dump(include=set(TransferOptions.model_fields))


class TransferService:
    """A daemon service: `move_data` answers at once with a durable handle; `run` advances
    every live transfer each cycle (after a restart too: the store is the only state)."""

    def __init__(
        self,
        store: Store,
        sites: Mapping[str, Site],
        adapters: Mapping[str, SiteAdapter] | None = None,
        *,
        home: Path,
        backends: Mapping[str, TransferBackend] | None = None,
        cycle_s: float = 10.0,
        clock: Callable[[], datetime] = _utcnow,
        on_change: Callable[[], object] | None = None,
    ) -> None:
        self.store = store
        self.sites = dict(sites)
        self.adapters = dict(adapters or {})
        self.home = home
        self._backends: dict[str, TransferBackend] = dict(backends or {})
        self.cycle_s = cycle_s
        self.clock = clock
        self.on_change = on_change  # wakes the orchestrator when a stage-in may be decided
        self.lock = anyio.Lock()
        self._answering: str | None = None  # the transfer move_data is answering, under lock
        self.wake = anyio.Event()
        self.roots = RootExpander(self.adapters, cycle_s=cycle_s)

    def backend(self, name: str) -> TransferBackend:
        """Backends are built on first use: the Globus SDK is imported only if it is needed."""
        if name not in self._backends:
            if name == "local":
                # startup: only the transfer backend the route needs (Globus pulls in its SDK)
                from fedhpc.transfer.local import LocalBackend

                self._backends[name] = LocalBackend(self.home / "transfers")
            elif name == "globus":
                # startup: only the transfer backend the route needs (Globus pulls in its SDK)
                from fedhpc.transfer.globus import GlobusBackend, acting_transfer_client

                self._backends[name] = GlobusBackend(
                    lambda: acting_transfer_client(self.home), home=self.home
                )
            else:
                raise KeyError(name)
        return self._backends[name]

    # -- operations -------------------------------------------------------------------------
    async def move_data(self, req: MoveDataRequest, *, owner: str | None = None) -> TransferHandle:
        """Record the transfer (with its `owner`, service mode, in the same transaction) and
        take its first step. Each person's keys are their own: the same key or the same
        arguments from two people are two transfers, neither told of the other's."""
        shown = request_key(req)
        key = shown if owner is None else f"{owner}\n{shown}"
        wake = req.continuation
        async with self.lock:
            async with self.store.transaction() as tx:
                existing = await records.get_by_key(tx, key)
                if existing is not None and _asks(existing) != _asks(req):
                    raise KeyConflict(
                        f"idempotency_key {shown!r} already names transfer {existing.id}, "
                        f"{existing.source_ref} -> {existing.destination_ref}, asked with other "
                        "arguments"
                    )
                # A retried call: the same transfer, never a second copy. Its caller is woken
                # too while it is live (no event of it can come between: the lock holds them).
                if existing is not None and wake is not None and not existing.state.terminal:
                    await put_continuation(tx, existing.id, wake, at=self.clock())
            if existing is not None:
                return existing.handle()
            rec = plan_transfer(
                req, self.sites, transfer_id=records.new_transfer_id(), now=self.clock()
            ).model_copy(update={"idempotency_key": key, "owner": owner})
            async with self.store.transaction() as tx:
                await records.put(tx, rec, at=self.clock())
                # With the record, before any step of it: an outcome observed at once (a
                # refused submit, a block, a copy done by the next cycle) finds its waiter.
                if wake is not None:
                    await put_continuation(tx, rec.id, wake, at=self.clock())
            self._answering = rec.id  # what happens now, the caller reads in its answer
            try:
                rec = await self._advance(rec)
            finally:
                self._answering = None
            return rec.handle()

    async def load(self, transfer_id: str) -> TransferRecord:
        async with self.store.transaction() as tx:
            rec = await records.get(tx, transfer_id)
        if rec is None:
            raise TransferNotFound(f"no transfer {transfer_id!r}")
        return rec

    async def view(self, req: TransferRequest) -> TransferView:
        """The transfer's state, sizes and checksums; a preview of the destination file only
        when asked, and at most `max_bytes`."""
        rec = await self.load(req.transfer_id)
        preview, truncated = None, False
        adapter = self.adapters.get(rec.destination.site)
        if (
            req.preview
            and adapter is not None
            and rec.state is TransferState.SUCCEEDED
            and not rec.options.recursive
        ):
            preview, truncated = await adapter.head(rec.destination.path, req.max_bytes)
        return rec.view(preview, truncated)

    # -- the cycle --------------------------------------------------------------------------
    async def tick(self) -> None:
        async with self.lock:
            async with self.store.transaction() as tx:
                live = await records.in_states(tx, _LIVE)
            for rec in live:
                try:
                    await self._advance(rec)
                except Exception:  # one transfer's trouble never stalls the others
                    log.exception("transfer cycle failed", transfer=rec.id)

    async def run(self, stopping: anyio.Event) -> None:
        while not stopping.is_set():
            try:
                await self.tick()
            except Exception:  # the store out of reach (a database restart): the next cycle
                log.exception("transfer cycle failed")  # tries again; never fatal to the daemon
            with anyio.move_on_after(self.cycle_s):
                await self.wake.wait()
            self.wake = anyio.Event()

    async def _advance(self, rec: TransferRecord) -> TransferRecord:
        if rec.state is TransferState.WAITING:
            rec = await self._release(rec)
        ends = (rec.source.site if rec.source else None, rec.destination.site)
        with acting_for(runs_as(rec.owner, self.sites, *ends)):
            if rec.state is TransferState.QUEUED:
                rec = await self._submit(rec)
            elif rec.state is TransferState.ACTIVE:
                rec = await self._poll(rec)
        return rec

    async def _release(self, rec: TransferRecord) -> TransferRecord:
        """A stage-out waits for its task: once it completed, its output is the source."""
        assert rec.after_task is not None
        assert rec.source_rel is not None
        row = await self.store.get_task(rec.after_task)
        state = row["state"] if row else "missing"
        if row is not None and state not in _ENDED:
            return rec  # still live: queued, placing, re-placed after a failed try, running...
        task = rec.after_task
        if state != "completed" or row is None:
            why = f"task {task} ended {state}: nothing to copy"
            err = TransferIssue(code="upstream_failed", message=why, hint=upstream_hint(task, row))
            return await self._end(rec, TransferState.FAILED, error=err, cause="upstream")
        accepted = row["body"].get("accepted_attempt")
        att = next((a for a in await self.store.attempts(task) if a["n"] == accepted), None)
        if att is None:
            err = TransferIssue(
                code="upstream_failed",
                message=f"task {task} completed but names no accepted attempt: the folder its "
                "output is in is unknown",
                hint=f"get_result('{task}') shows where it ran and its output; copy the file "
                "with move_data(source='site:root/path' as its outputs show, destination=...) "
                "and give the tasks that "
                "waited for this transfer that transfer's id as stage_in.",
            )
            # Not cause "upstream": the task completed, so its own event (if any) said nothing
            # of this; a waiting task's task.stage_in_failed carries this hint to its agent.
            return await self._end(rec, TransferState.FAILED, error=err)
        workdir = str(att["body"].get("workdir") or "")
        path = posixpath.normpath(posixpath.join(workdir, rec.source_rel))
        try:
            site = self.sites[att["site"]]
            src = locate(site, path, await self.roots.named(site))
            backend = choose_backend(site, self.sites[rec.destination.site])
        except TransferUnavailable as exc:  # the site's `$NAME` roots are unread: next cycle
            log.warning("stage-out source deferred", transfer=rec.id, error=exc.message)
            return rec
        except FedError as exc:
            return await self._end(rec, TransferState.FAILED, error=_err(exc))
        rec.source, rec.backend, rec.state = src, backend, TransferState.QUEUED
        rec.trace = (
            *rec.trace,
            f"task {rec.after_task} completed on {src.site}: source "
            f"{src.path} (root {src.root}); backend {backend}",
        )
        return await self._save(rec)

    async def _submit(self, rec: TransferRecord) -> TransferRecord:
        assert rec.backend is not None
        assert rec.source is not None
        backend = self.backend(rec.backend)
        try:
            # A `$NAME` root becomes the path the site's shell gives it, before any copy.
            source = await self.roots.location(rec.source)
            destination = await self.roots.location(rec.destination)
            if (source, destination) != (rec.source, rec.destination):
                rec.source, rec.destination = source, destination
                rec.trace = (
                    *rec.trace,
                    f"roots expanded at the sites: source {source.path}, "
                    f"destination {destination.path}",
                )
                rec = await self._save(rec)
            sid = rec.submission_id
            if sid is None:
                sid = rec.submission_id = await backend.submission_id()
                rec = await self._save(rec)  # persisted BEFORE submitting: a retry reuses it
            spec = TransferSpec(
                transfer_id=rec.id,
                submission_id=sid,
                source=source,
                destination=destination,
                recursive=rec.options.recursive,
                sync_level=rec.options.sync_level,
                verify_checksum=rec.options.verify_checksum,
                label=rec.label,
            )
            backend_id = await backend.submit(spec)
        except TransferUnavailable as exc:
            log.warning("transfer submit deferred", transfer=rec.id, error=exc.message)
            return rec
        except FedError as exc:
            return await self._end(rec, TransferState.FAILED, error=_err(exc))
        rec.backend_id, rec.submitted_at = backend_id, self.clock()
        rec.state = TransferState.ACTIVE
        log.info("transfer submitted", transfer=rec.id, backend=rec.backend, id=backend_id)
        return await self._save(rec)

    async def _poll(self, rec: TransferRecord) -> TransferRecord:
        assert rec.backend is not None
        assert rec.backend_id is not None
        try:
            st = await self.backend(rec.backend).status(rec.backend_id)
        except TransferUnavailable as exc:
            log.warning("transfer poll failed", transfer=rec.id, error=exc.message)
            return rec
        except FedError as exc:  # credentials: the copy may go on, but we cannot see it
            if rec.blocked is None or rec.blocked.code != exc.code:
                return await self._block(rec, _err(exc))
            return rec
        rec.bytes = st.bytes if st.bytes is not None else rec.bytes
        rec.files = st.files if st.files is not None else rec.files
        rec.checksums = st.checksums or rec.checksums
        if st.checksum_verified is not None:
            rec.checksum_verified = st.checksum_verified
        if st.state.terminal:
            rec.blocked = None
            return await self._end(rec, st.state, error=st.error)
        if st.blocked is not None and (rec.blocked is None or rec.blocked.code != st.blocked.code):
            return await self._block(rec, st.blocked)
        rec.blocked = st.blocked
        return await self._save(rec)

    async def _block(self, rec: TransferRecord, err: TransferIssue) -> TransferRecord:
        rec.blocked, rec.blocks = err, rec.blocks + 1
        return await self._save(rec, blocked=True)

    async def _end(
        self,
        rec: TransferRecord,
        state: TransferState,
        *,
        error: TransferIssue | None = None,
        cause: str | None = None,
    ) -> TransferRecord:
        rec.state, rec.error, rec.cause, rec.completed_at = state, error, cause, self.clock()
        log.info(
            "transfer ended",
            transfer=rec.id,
            state=state.value,
            error=error.code if error else None,
        )
        rec = await self._save(rec)
        if self.on_change is not None:
            self.on_change()
        return rec

    async def _save(self, rec: TransferRecord, *, blocked: bool = False) -> TransferRecord:
        """Write the record and the event its change tells, if any (transfer/events.py)."""
        async with self.store.transaction() as tx:
            answered = rec.id == self._answering
            await events.save(tx, rec, clock=self.clock, blocked=blocked, answered=answered)
        if blocked and self.on_change is not None:  # the bridge, or staging for the waiters
            self.on_change()
        return rec


def _err(exc: FedError) -> TransferIssue:
    return TransferIssue(code=exc.code, message=exc.message, hint=exc.hint)
