"""The client never reuses an idle connection the daemon may be closing: its pool lets one go
well before the daemon's keep-alive (uvicorn's, `KEEP_ALIVE_S`). At httpx's default, equal to
the daemon's, a request sent as the daemon closed the connection was lost on it: CI saw
`/v1/health was sent to the daemon but the answer was lost` after a 5 s idle. And a read lost
with its connection anyway (a daemon killed under it) is asked again once: CI saw a resumed
turn's get_result answer `daemon_timeout` for a daemon that was gone (test_e2e_unreached)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from fedhpc.client.errors import DaemonUnavailable, OutcomeUnknown
from fedhpc.client.wire import IDLE_REUSE_S, DaemonWire
from fedhpc.daemon import api
from fedhpc.daemon.rest import KEEP_ALIVE_S
from fedhpc.settings.daemon import DaemonSettings


async def test_an_idle_connection_is_let_go_well_before_the_daemon_closes_it(
    tmp_path: Path,
) -> None:
    wire = DaemonWire(DaemonSettings(home=tmp_path))
    try:
        # httpx2's pool (private: no public reader of the transport's limits) holds the expiry.
        pool = wire.http._transport._pool  # type: ignore[attr-defined]
        assert pool._keepalive_expiry == IDLE_REUSE_S
        assert IDLE_REUSE_S <= KEEP_ALIVE_S / 2  # room for a loaded daemon's late close
    finally:
        await wire.aclose()


async def _closing_daemon(sock: Path, answered: bool) -> tuple[list[bytes], Any]:
    """A socket that takes the first request and closes without an answer (a daemon killed
    with the request on its connection); then answers the next (`answered`: a daemon still
    there) or is gone (its socket removed)."""
    seen: list[bytes] = []
    listener = await anyio.create_unix_listener(sock)

    async def serve() -> None:
        async with listener:
            first = await listener.accept()
            seen.append(await first.receive())
            await first.aclose()
            if not answered:
                sock.unlink()
                return
            second = await listener.accept()
            seen.append(await second.receive())
            body = b'{"ok": true}'
            head = f"HTTP/1.1 200 OK\r\ncontent-length: {len(body)}\r\n\r\n".encode()
            await second.send(head + body)
            await second.aclose()

    return seen, serve


@pytest.mark.parametrize("answered", [False, True], ids=["gone", "still-there"])
async def test_a_read_whose_connection_closed_is_asked_again_once(
    tmp_path: Path, answered: bool
) -> None:
    """A read's answer lost with its connection is not `daemon_timeout`: asked again on a new
    connection, it is the answer, or `daemon_unavailable` when no daemon is there any more
    (what a resumed turn's warm MCP server waits on for a restarting daemon)."""
    settings = DaemonSettings(home=tmp_path)
    seen, serve = await _closing_daemon(settings.socket_path, answered)
    wire = DaemonWire(settings)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(serve)
            if answered:
                assert await wire.call(api.HEALTH) == {"ok": True}
            else:
                with pytest.raises(DaemonUnavailable):
                    await wire.call(api.HEALTH)
        assert len(seen) == 1 + answered
    finally:
        await wire.aclose()


async def test_a_change_whose_connection_closed_is_not_sent_again(tmp_path: Path) -> None:
    """A change may have taken effect: it is never sent twice, its outcome is unknown."""
    settings = DaemonSettings(home=tmp_path)
    seen, serve = await _closing_daemon(settings.socket_path, answered=True)
    wire = DaemonWire(settings)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(serve)
            with pytest.raises(OutcomeUnknown):
                await wire.call(api.CANCEL, "t1", effect="change")
            tg.cancel_scope.cancel()
        assert len(seen) == 1
    finally:
        await wire.aclose()
