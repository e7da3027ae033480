"""The REST server on the daemon's Unix socket: uvicorn with the limits a shared daemon needs.

uvicorn closes an idle keep-alive connection only after a response, so a client that connects
and sends nothing, or half a request head, held its connection (and a file descriptor) for as
long as it liked: 300 such clients held 300 connections for over 70 s. Here every request head
has a deadline from the moment the daemon waits for it (connect, or the previous response),
request bodies have theirs in `limits.read_body`, and connections beyond a cap are answered 503
instead of piling up."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import h11
import structlog
import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["HEAD_TIMEOUT_S", "KEEP_ALIVE_S", "MAX_CONNECTIONS", "MAX_HEAD_BYTES", "RestServer"]

log = structlog.get_logger(__name__)

HEAD_TIMEOUT_S = 10.0  # a whole request head, from connect or the previous response
KEEP_ALIVE_S = 5.0  # an idle connection after a response (uvicorn's own timer)
MAX_CONNECTIONS = 512  # connections and requests in flight; beyond, 503 (uvicorn)
MAX_HEAD_BYTES = 16 * 1024  # request line and headers (h11); beyond, 400


class _Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request head: once it passes while the
    connection still waits for one (nothing sent, or half a head), the connection is closed. A
    request being answered is never cut (its body has its own deadline)."""

    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        if not self.transport.is_closing():
            self._head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_late)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        waiting = self.cycle is None or self.cycle.response_complete
        if waiting and not self.transport.is_closing():
            log.debug("REST connection closed: no whole request head", after_s=HEAD_TIMEOUT_S)
            with contextlib.suppress(h11.LocalProtocolError):
                self.conn.send(h11.ConnectionClosed())
            self.transport.close()


class RestServer(uvicorn.Server):
    """uvicorn with the limits above and without its own signal handlers: the daemon's
    supervisor owns SIGTERM and SIGINT."""

    def __init__(self, app: ASGIApp, **config: Any) -> None:
        super().__init__(
            uvicorn.Config(
                app,
                http=_Protocol,
                log_config=None,
                access_log=False,
                lifespan="off",
                timeout_notify=5,
                timeout_keep_alive=int(KEEP_ALIVE_S),
                limit_concurrency=MAX_CONNECTIONS,
                h11_max_incomplete_event_size=MAX_HEAD_BYTES,
                **config,
            )
        )

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield
