"""The server's only dependency: the daemon, started detached when its socket does not answer."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

import anyio
import structlog

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.client.errors import DaemonUnavailable
from fedhpc.client.start import start_daemon
from fedhpc.settings.daemon import DaemonSettings

__all__ = ["DaemonLink", "open_link"]

log = structlog.get_logger(__name__)

R = TypeVar("R")


class DaemonLink:
    """Calls the daemon; on `DaemonUnavailable` starts it once (`autostart`), or waits up to
    `wait_s` for one to answer (a daemon restarting: the resume bridge's own server, which
    must never start a daemon itself), and retries.

    The retry is safe for every call, submissions included: `DaemonUnavailable` means the
    connection was refused, so the request never reached a daemon."""

    def __init__(
        self,
        settings: DaemonSettings,
        client: DaemonClient,
        *,
        autostart: bool = True,
        wait_s: float = 0.0,
    ) -> None:
        self.settings = settings
        self.client = client
        self.autostart = autostart
        self.wait_s = wait_s
        self._starting = anyio.Lock()
        self.startup_timeout_s = 30.0

    async def call(self, op: Callable[[DaemonClient], Awaitable[R]]) -> R:
        try:
            return await op(self.client)
        except DaemonUnavailable:
            if not self.autostart and self.wait_s <= 0:
                raise
        if self.autostart:
            await self.ensure_daemon()
        else:
            await self.await_daemon()
        return await op(self.client)

    async def await_daemon(self) -> None:
        """Wait up to `wait_s` for a daemon to answer, starting none."""
        try:
            await self.client.wait_until_up(self.wait_s)
        except DaemonUnavailable as exc:
            raise DaemonUnavailable(
                f"no daemon answered at {self.settings.socket_path} within {self.wait_s:g} s",
                hint=f"Start it (`fedhpc daemon restart`); its log: {self.settings.log_path}",
            ) from exc

    async def ensure_daemon(self) -> None:
        """Start `fedhpc daemon` detached unless one answers; wait until it does."""
        async with self._starting:
            try:
                await self.client.health()
            except DaemonUnavailable:
                pid = start_daemon(self.settings)
                log.info("daemon started", pid=pid, home=str(self.settings.home))
            else:
                return
            try:
                await self.client.wait_until_up(self.startup_timeout_s)
            except DaemonUnavailable as exc:
                raise DaemonUnavailable(
                    exc.message, hint=f"See the daemon's log: {self.settings.log_path}"
                ) from exc


@asynccontextmanager
async def open_link(
    settings: DaemonSettings, *, autostart: bool = True, wait_s: float = 0.0
) -> AsyncIterator[DaemonLink]:
    async with DaemonClient(settings) as client:
        yield DaemonLink(settings, client, autostart=autostart, wait_s=wait_s)
