"""REST handlers of the event log: list, acknowledge (a pulling client's cursor), archive."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from fedhpc.daemon import api
from fedhpc.daemon.api import Endpoint
from fedhpc.daemon.guard import Handler
from fedhpc.daemon.limits import read_body
from fedhpc.daemon.owner import principal
from fedhpc.daemon.state import DaemonState
from fedhpc.errors import UsageError
from fedhpc.ops.events import AckRequest, ArchiveRequest, EventsQuery, check_consumer
from fedhpc.store.archive import archive_events

__all__ = ["CursorAhead", "handlers"]


class CursorAhead(UsageError):
    """`after` is past every event this store has given a seq to: made up, or from another
    store. It is refused rather than answered with an empty page echoing it back: a reader
    would wait for events that, when they come, are listed only past that seq."""

    code = "cursor_ahead"


def handlers(state: DaemonState) -> dict[Endpoint, Handler]:
    async def events(request: Request) -> Response:
        q = EventsQuery.model_validate(dict(request.query_params))
        after = q.after
        if q.consumer is not None:  # what the consumer acknowledged is not listed again
            after = max(after, await state.store.cursor(principal(request).consumer(q.consumer)))
        owner = principal(request).scope
        rows = await state.store.events_after(after, limit=q.limit, owner=owner)
        if not rows and q.wait_s > 0:  # a long poll: woken by events of this or another daemon
            with anyio.move_on_after(q.wait_s):
                while not rows and not state.stopping.is_set():
                    landed = state.landed
                    rows = await state.store.events_after(after, limit=q.limit, owner=owner)
                    if not rows:
                        await landed.wait()
        if not rows and q.after > 0:
            # Seqs only grow and archiving keeps the newest one (store.last_seq), so an `after`
            # beyond it was never given out by this store.
            newest = await state.store.last_seq()
            if q.after > newest:
                raise CursorAhead(
                    f"after={q.after} is beyond the newest event (seq {newest}): this daemon "
                    "never gave that seq out, and the events before it would be skipped",
                    hint=f"Pass after={newest} to read only events from now on, "
                    "or after=0 for every kept event.",
                )
        return JSONResponse({"events": [e.model_dump(mode="json") for e in rows]})

    async def ack(request: Request) -> Response:
        req = AckRequest.model_validate_json(await read_body(request))
        check_consumer(req.consumer)
        # Never past the newest event: an acknowledgement of a future seq would hide events
        # that have not happened yet.
        through = min(req.through, await state.store.last_seq())
        consumer = principal(request).consumer(req.consumer)
        async with state.store.transaction() as tx:
            await tx.set_cursor(consumer, through, at=datetime.now(UTC))
        return JSONResponse({"cursor": await state.store.cursor(consumer)})

    async def archive(request: Request) -> Response:
        """Move old delivered events to the archive (store/archive.py)."""
        req = ArchiveRequest.model_validate_json(await read_body(request))
        if state.archive_path is None:
            raise UsageError("this daemon has no archive folder")
        now = datetime.now(UTC)
        report = await archive_events(
            state.store,
            state.archive_path,
            now=now,
            before=now - timedelta(days=req.older_than_days),
            dry_run=req.dry_run,
        )
        return JSONResponse(report.as_dict())

    return {api.EVENTS: events, api.ACK_EVENTS: ack, api.ARCHIVE_EVENTS: archive}
