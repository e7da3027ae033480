"""The store's read of the daemon lease (store/lease.py) outside a transaction: who holds it.
A mixin of `Store` (store/db.py); only PostgreSQL stores have the lease."""

from __future__ import annotations

from fedhpc.store.reads import Reads

__all__ = ["HOLDER", "LeaseReads"]

# The lease row's holder, token and whether it is live (lease.acquire reads it too).
HOLDER = "SELECT holder, token, expires_at > now() AS live FROM fedhpc_lease WHERE name = ?"


class LeaseReads(Reads):
    """Who holds a lease, read without taking the write lock."""

    async def lease_holder(self, name: str) -> dict[str, object] | None:
        """The lease `name`'s {holder, token, live}, or None (SQLite, or never taken)."""
        if self._pg is None:
            return None
        exists = await self._all("SELECT to_regclass('fedhpc_lease') IS NOT NULL")
        if not exists[0][0]:
            return None
        rows = await self._all(HOLDER, (name,))
        if not rows:
            return None
        row = rows[0]
        return {"holder": row["holder"], "token": int(row["token"]), "live": row["live"]}
