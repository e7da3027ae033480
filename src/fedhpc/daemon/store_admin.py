"""The store looked at and moved without the daemon (`fedhpc store status|migrate|export|
import`): SQLite or PostgreSQL, as FEDHPC_STORE_URL names it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TextIO

from fedhpc.settings.daemon import DaemonSettings
from fedhpc.store import is_postgres_url, open_store, store_url
from fedhpc.store.dump import COLUMNS, export_rows, import_rows
from fedhpc.store.lease import holder_of
from fedhpc.store.schema import SCHEMA_VERSION

__all__ = ["SCHEMA_VERSION", "export_store", "import_store", "migrate_store", "missing_store",
           "store_status"]  # fmt: skip


def _default() -> Path:
    return DaemonSettings.from_env().db_path


def missing_store() -> dict[str, Any] | None:
    """The status of a SQLite store not yet made (None: there is one to open)."""
    url = store_url(_default())
    if is_postgres_url(url) or Path(url).exists():
        return None
    return {"engine": "sqlite", "location": url, "exists": False, "schema": 0,
            "fedhpc_schema": SCHEMA_VERSION}  # fmt: skip


async def store_status() -> dict[str, Any]:
    engine = "postgresql" if is_postgres_url(store_url(_default())) else "sqlite"
    store = await open_store(_default(), readonly=True)
    try:
        schema = await store.schema_version()
        current = schema == SCHEMA_VERSION
        return {
            "engine": engine,
            "location": store.location,
            "exists": True,
            "schema": schema,
            "fedhpc_schema": SCHEMA_VERSION,
            "last_seq": await store.last_seq() if current else None,
            "rows": {t: await store.count(t) for t in COLUMNS} if current else {},
            "leader": await holder_of(store),  # PostgreSQL: the daemon holding the lease
        }
    finally:
        await store.close()


async def migrate_store() -> dict[str, Any]:
    store = await open_store(_default(), migrate=False)
    try:
        before, after = await store.migrate()
        return {"location": store.location, "from": before, "to": after}
    finally:
        await store.close()


async def export_store(out: TextIO) -> int:
    """Every row to `out` as JSON lines; how many rows."""
    store = await open_store(_default(), readonly=True)
    n = 0
    try:
        async for line in export_rows(store):
            out.write(line)
            n += 1
    finally:
        await store.close()
    return n - 1


async def import_store(lines: TextIO) -> dict[str, int]:
    store = await open_store(_default())
    try:
        return await import_rows(store, lines)
    finally:
        await store.close()
