"""The client never reuses an idle connection the daemon may be closing: its pool lets one go
well before the daemon's keep-alive (uvicorn's, `KEEP_ALIVE_S`). At httpx's default, equal to
the daemon's, a request sent as the daemon closed the connection was lost on it: CI saw
`/v1/health was sent to the daemon but the answer was lost` after a 5 s idle."""

from __future__ import annotations

from pathlib import Path

from fedhpc.client.wire import IDLE_REUSE_S, DaemonWire
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
