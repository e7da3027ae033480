"""What a stopped daemon last knew: the federation view from its store, read-only (for
`fedhpc status` after `fedhpc daemon --once`, or while the daemon is down)."""

from __future__ import annotations

from datetime import UTC, datetime

from fedhpc.ops.inspect import FederationView, InspectRequest, inspect_federation
from fedhpc.profiles import load_federation
from fedhpc.settings.daemon import DaemonSettings
from fedhpc.store import open_store

__all__ = ["stored_federation"]


async def stored_federation(settings: DaemonSettings, req: InspectRequest) -> FederationView:
    """The view from the newest stored probes of each enabled site; nothing is probed."""
    store = await open_store(settings.db_path, readonly=True)
    try:
        states = await store.latest_site_states()
    finally:
        await store.close()
    return inspect_federation(
        states,
        load_federation(),
        now=datetime.now(UTC),
        refresh_s=settings.refresh_s,
        request=req,
    )
