"""The daemon's store: SQLite in WAL mode (the default) or PostgreSQL, with migrations, an
append-only event log and cursors."""

from pathlib import Path

from fedhpc.settings import STORE_URL
from fedhpc.store.db import Store, Tx, WaitSample
from fedhpc.store.events import Event, event_id
from fedhpc.store.reads import quick_reads

__all__ = [
    "Event",
    "Store",
    "Tx",
    "WaitSample",
    "event_id",
    "is_postgres_url",
    "open_store",
    "quick_reads",
    "store_url",
]


def store_url(default: Path) -> str:
    """Where the store is: FEDHPC_STORE_URL when set, else the SQLite file `default`."""
    return STORE_URL.read() or str(default)


def is_postgres_url(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://"))


async def open_store(
    default: Path, *, readonly: bool = False, migrate: bool = True, idle_s: float | None = None
) -> Store:
    """The store FEDHPC_STORE_URL names, else the SQLite file `default`. `readonly`: a reader
    for people's tools while the daemon is down (on PostgreSQL: no migration either).
    `idle_s` (PostgreSQL): no session of this store stays inside a transaction longer."""
    url = store_url(default)
    if is_postgres_url(url):
        return await Store.open_url(url, migrate=migrate and not readonly, idle_s=idle_s)
    return await (Store.open_readonly(Path(url)) if readonly else Store.open(Path(url)))
