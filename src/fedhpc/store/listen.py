"""Events reach every daemon on one PostgreSQL store: a write transaction that appends events
sends one NOTIFY on `CHANNEL` (delivered at its commit, never for a rolled-back one), with
this process's `ORIGIN` as payload; every daemon LISTENs and wakes its waiters (the placer,
the bridge, REST readers of the log) for another process's events. A notification carries
no event: a woken reader reads the log after its cursor (`events_after`), so nothing is lost
to a dropped connection or a notification that came while nobody listened (it reconnects
and wakes once on the way). On SQLite (one daemon per file) there is nothing to listen to."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio
import structlog

if TYPE_CHECKING:
    from fedhpc.store.db import Store

__all__ = ["CHANNEL", "ORIGIN", "listen_events"]

CHANNEL = "fedhpc_events"
ORIGIN = f"{socket.gethostname()}:{os.getpid()}"

log = structlog.get_logger("fedhpc.store.listen")


async def listen_events(
    store: Store, woken: Callable[[], None], stopping: anyio.Event, *, retry_s: float = 1.0
) -> None:
    """Call `woken` for each commit of another process that appended events, until
    `stopping`; on a lost connection, reconnect (and wake once: some may have been missed)."""
    url = store.url_for_listen()
    if url is None:
        return
    import psycopg  # PostgreSQL only

    while not stopping.is_set():
        try:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                await conn.execute(f"LISTEN {CHANNEL}")
                woken()  # anything committed while this process was not listening
                async with anyio.create_task_group() as tg:

                    async def stop() -> None:
                        await stopping.wait()
                        tg.cancel_scope.cancel()

                    tg.start_soon(stop)
                    async for note in conn.notifies():
                        if note.payload != ORIGIN:
                            woken()
                    tg.cancel_scope.cancel()
        except Exception as exc:  # the store out of reach: the log read catches up later
            log.warning("listening for events failed: retrying", error=str(exc))
            with anyio.move_on_after(retry_s):
                await stopping.wait()
