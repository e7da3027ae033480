"""The daemon's lease on a PostgreSQL store (store/lease.py): wait to lead, renew the lease
every third of its length, and stop as soon as another daemon has taken it over."""

from __future__ import annotations

import os
import socket

import anyio
import structlog

from fedhpc.settings.daemon import DaemonSettings
from fedhpc.store import Store
from fedhpc.store.lease import Fenced, Lease, acquire, holder_of, release, renew

__all__ = ["keep_lease", "release_lease", "take_lease"]

log = structlog.get_logger("fedhpc.daemon.leader")


async def take_lease(
    store: Store, settings: DaemonSettings, stopping: anyio.Event | None = None
) -> Lease | None:
    """The lease, once this daemon leads (at once on SQLite, where the file lock decides);
    fences the store with its token. None if `stopping` came first. Meanwhile the daemon
    follows: it answers requests, and the leader does the work."""
    me = f"{socket.gethostname()}:{os.getpid()}"
    told = False
    while (lease := await acquire(store, me, ttl_s=settings.lease_s)) is None:
        if not told:
            log.info("another daemon leads this store: following", leader=await holder_of(store))
            told = True
        if stopping is None:
            await anyio.sleep(settings.lease_s / 3)
            continue
        with anyio.move_on_after(settings.lease_s / 3):
            await stopping.wait()
        if stopping.is_set():
            return None
    if lease.token:
        log.info("leading the store", holder=me, token=lease.token, lease_s=lease.ttl_s)
    return lease


async def keep_lease(store: Store, lease: Lease, stopping: anyio.Event) -> None:
    """Renew every third of the lease until stopping; `Fenced` (the daemon stops) when
    another daemon took it over, e.g. after this process was paused past it."""
    if not lease.token:
        return
    while not stopping.is_set():
        with anyio.move_on_after(lease.ttl_s / 3):
            await stopping.wait()
        if stopping.is_set():
            return
        try:
            kept = await renew(store, lease)
        except Exception as exc:  # out of reach: the fence guards the writes
            log.warning("lease not renewed", error=str(exc))
            continue
        if not kept:
            log.error("another daemon took over the store's lease: stopping", token=lease.token)
            raise Fenced(f"lease {lease.name!r} token {lease.token} is no longer held")


async def release_lease(store: Store, lease: Lease) -> None:
    """Give the lease up at stop, so a restarted or standby daemon leads at once; a store
    that is out of reach keeps it until it lapses."""
    try:
        await release(store, lease)
    except Exception as exc:  # stopping anyway: it lapses by itself
        log.warning("lease not released", error=str(exc))
