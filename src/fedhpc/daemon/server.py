"""The daemon process: one task group of named services, a private Unix socket, SIGTERM grace."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO

import anyio
import structlog

from fedhpc.adapters.site import SiteAdapter, open_adapter
from fedhpc.adapters.transports.children import children_watched_by_pidfd
from fedhpc.bridge import Bridge
from fedhpc.collector import Collector
from fedhpc.daemon.app import build_app
from fedhpc.daemon.leader import keep_lease, release_lease, take_lease
from fedhpc.daemon.loopwatch import LoopWatch
from fedhpc.daemon.memory import trim_each_cycle
from fedhpc.daemon.rest import RestServer
from fedhpc.daemon.state import DaemonState
from fedhpc.errors import UsageError
from fedhpc.globus_auth.people import PersonTokens, install
from fedhpc.orchestrator import Orchestrator
from fedhpc.profiles import load_federation
from fedhpc.profiles.loader import load_user_config
from fedhpc.settings.daemon import DaemonSettings
from fedhpc.store import Store, open_store
from fedhpc.store.archive import archive_events
from fedhpc.store.lease import Lease
from fedhpc.store.listen import listen_events
from fedhpc.transfer.service import TransferService

__all__ = ["run_daemon"]

log = structlog.get_logger(__name__)


@contextlib.contextmanager
def _single_instance(settings: DaemonSettings) -> Iterator[IO[str]]:
    """One daemon per home: an exclusive lock held for the process's life."""
    settings.home.mkdir(parents=True, exist_ok=True, mode=0o700)
    settings.home.chmod(0o700)
    fh = settings.lock_path.open("a+")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        raise UsageError(
            f"a fedhpc daemon already runs for {settings.home}",
            hint="Use it (fedhpc status), or `fedhpc daemon stop` / `fedhpc daemon restart`.",
        ) from None
    try:
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        yield fh
    finally:
        fh.close()


def _bind(path: Path) -> socket.socket:
    """A Unix socket only the user can reach (0600 in a 0700 folder)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # we hold the lock: any socket file here is stale
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)
    path.chmod(0o600)
    sock.listen(64)
    return sock


async def _close_adapters(adapters: dict[str, SiteAdapter]) -> None:
    with anyio.CancelScope(shield=True):
        for adapter in adapters.values():
            await adapter.transport.aclose()


async def run_daemon(
    settings: DaemonSettings,
    *,
    once: bool = False,
    people: Callable[[], PersonTokens | None] | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT (or run one control cycle with `once`). `people` makes
    each person's tokens, for sites that run people as themselves (service mode)."""
    tokens = people() if people is not None else None
    install(tokens)
    try:
        with children_watched_by_pidfd() as pidfd:
            if not pidfd:
                log.info("child processes watched by a thread each (no pidfd here)")
            await _run_daemon(settings, once=once)
    finally:
        install(None)
        if tokens is not None:
            with anyio.CancelScope(shield=True):
                await tokens.aclose()


async def _run_daemon(settings: DaemonSettings, *, once: bool) -> None:
    with _single_instance(settings):
        # A paused daemon's open transaction (and the write lock) ends with its lease.
        store = await open_store(settings.db_path, idle_s=settings.lease_s)
        sites = load_federation()
        adapters = {
            name: open_adapter(
                site,
                command_timeout_s=settings.command_timeout_s,
                ping_timeout_s=settings.ping_timeout_s,
            )
            for name, site in sites.items()
        }
        collector = Collector(
            sites,
            adapters,
            store,
            refresh_s=settings.refresh_s,
            probe_timeout_s=settings.probe_timeout_s,
            history_keep=settings.history_keep,
        )
        orchestrator = Orchestrator(
            store,
            collector,
            adapters,
            cycle_s=settings.cycle_s,
            stall_s=settings.stall_s,
            intent_grace_s=settings.intent_grace_s,
            site_lost_after_s=settings.site_lost_s,
            retry_window_s=settings.retry_window_s,
            place_wait_s=settings.place_wait_s,
            ping_timeout_s=settings.ping_timeout_s,
            estimate_timeout_s=settings.estimate_timeout_s,
            submits_per_cycle=settings.submits_per_cycle,
        )
        lease: Lease | None = None
        try:
            await collector.load()
            if once:
                lease = await take_lease(store, settings)  # PostgreSQL: one leader per store
                report = await collector.refresh(force=True)
                await orchestrator.place_queued()
                await orchestrator.tick()
                await Bridge(store, settings.home).cycle()
                log.info("cycle done", sites=len(report.probed), seconds=round(report.wall_s, 3))
                return
            await _serve(settings, store, collector, orchestrator)
        finally:
            await _close_adapters(adapters)
            with anyio.CancelScope(shield=True):
                try:
                    if lease is not None:
                        await release_lease(store, lease)
                finally:
                    await store.close()


async def _serve(
    settings: DaemonSettings,
    store: Store,
    collector: Collector,
    orchestrator: Orchestrator,
) -> None:
    """Answer REST (and MCP through it) at once, leader or follower; run the single loops
    (collector, control cycle, placer, bridge, transfers, archiver) only while leading the
    store (PostgreSQL; on SQLite at once). Every daemon listens for the others' events."""
    state = DaemonState(store, collector, datetime.now(UTC), orchestrator)
    bridge = Bridge(
        store,
        settings.home,
        poll_s=settings.bridge_poll_s,
        max_attempts=settings.bridge_attempts,
        backoff_s=settings.bridge_backoff_s,
        process_timeout_s=settings.resume_timeout_s,
        start_timeout_s=settings.resume_start_timeout_s,
        resume=lambda: load_user_config().resume,
        warm_mcp=settings.resume_warm_mcp,
        daemon_wait_s=settings.resume_daemon_wait_s,
    )
    state.bridge = bridge

    landed, woken = _wakers(state, orchestrator, bridge)
    orchestrator.notify = landed
    orchestrator.resume_blocker = bridge.blocker

    def changed() -> None:
        orchestrator.wake.set()
        bridge.wake.set()

    def lost() -> None:  # a site went offline: its queued work moves in this cycle
        orchestrator.wake.set()  # looked up now: each cycle has its own event

    collector.on_lost = lost

    state.archive_path = settings.archive_path
    state.transfers = transfers = TransferService(
        store,
        collector.sites,
        orchestrator.adapters,
        home=settings.home,
        cycle_s=settings.cycle_s,
        on_change=changed,
    )
    server = RestServer(build_app(state))
    sock = _bind(settings.socket_path)
    stopping = anyio.Event()
    log.info("daemon up", socket=str(settings.socket_path), sites=sorted(collector.sites))

    async def watch_signals(services: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                log.info("stopping", signal=signal.Signals(signum).name, grace_s=settings.grace_s)
                stopping.set()  # stop claiming new work
                state.stop()  # long polls answer now
                collector.wake.set()
                orchestrator.wake.set()
                bridge.wake.set()
                transfers.wake.set()
                server.should_exit = True
                await anyio.sleep(settings.grace_s)
                services.cancel()  # grace is over
                return

    try:
        async with anyio.create_task_group() as outer:
            async with anyio.create_task_group() as services:
                outer.start_soon(watch_signals, services.cancel_scope, name="signals")
                services.start_soon(_lead, settings, store, state, stopping, name="lead")
                services.start_soon(listen_events, store, woken, stopping, name="listen")
                services.start_soon(trim_each_cycle, settings.cycle_s, stopping, name="trim")
                services.start_soon(server.serve, [sock], name="rest")
                if settings.loop_watch_s > 0:
                    watch = LoopWatch(settings.loop_watch_s)
                    services.start_soon(watch.run, stopping, name="loopwatch")
            outer.cancel_scope.cancel()  # the services ended: stop watching signals
    finally:
        sock.close()
        with contextlib.suppress(FileNotFoundError):
            settings.socket_path.unlink()
        log.info("daemon down")


def _wakers(
    state: DaemonState, orchestrator: Orchestrator, bridge: Bridge
) -> tuple[Callable[[], None], Callable[[], None]]:
    """Who to wake for events of this process (`landed`) and of another daemon on the same
    store (`woken`, store/listen.py)."""

    def landed() -> None:  # events of this process: the bridge and REST readers of the log
        bridge.wake.set()  # not `bridge.wake.set` bound once: Bridge.run replaces its Event
        state.events_landed()

    def woken() -> None:  # another daemon's events (store/listen.py): queued work, placements
        orchestrator.placer.wake()
        progress, orchestrator.placer.progress = orchestrator.placer.progress, anyio.Event()
        progress.set()  # a follower's submit waiting for the leader's placement
        landed()

    return landed, woken


async def _lead(
    settings: DaemonSettings, store: Store, state: DaemonState, stopping: anyio.Event
) -> None:
    """Once this daemon leads the store, the loops that must be single, until stopping (or
    `Fenced`: another daemon took over, and this one stops)."""
    async with anyio.create_task_group() as waiting:
        # Until it leads, the view is the leader's (a follower never probes a site itself).
        waiting.start_soon(state.collector.follow, name="follow")
        lease = await take_lease(store, settings, stopping)  # PostgreSQL: one leader per store
        waiting.cancel_scope.cancel()
    if lease is None:
        return
    assert state.bridge is not None
    assert state.transfers is not None
    try:
        async with anyio.create_task_group() as single:
            single.start_soon(keep_lease, store, lease, stopping, name="lease")
            single.start_soon(state.collector.run, stopping, name="collector")
            single.start_soon(state.orchestrator.run, stopping, name="orchestrator")
            single.start_soon(state.bridge.run, stopping, name="bridge")
            single.start_soon(state.transfers.run, stopping, name="transfers")
            single.start_soon(_archiver, store, settings, stopping, name="archiver")
    finally:
        with anyio.CancelScope(shield=True):
            await release_lease(store, lease)


ARCHIVE_EVERY_S = 3600.0


async def _archiver(store: Store, settings: DaemonSettings, stopping: anyio.Event) -> None:
    """Keep the event log bounded: once an hour (and at start), delivered events older than
    `events_keep_days` move to <home>/archive (store/archive.py); 0 turns it off."""
    if settings.events_keep_days <= 0:
        return
    while not stopping.is_set():
        now = datetime.now(UTC)
        try:
            before = now - timedelta(days=settings.events_keep_days)
            report = await archive_events(store, settings.archive_path, now=now, before=before)
            if report.archived:
                log.info("events archived", **report.as_dict())
        except Exception:  # bookkeeping only: never fatal to the daemon
            log.exception("archiving events failed")
        with anyio.move_on_after(ARCHIVE_EVERY_S):
            await stopping.wait()
