"""Leading a store on PostgreSQL: one lease row with a fencing token, so that of several daemons
on one database exactly one does the work that must be single, and a former leader (paused
past its lease, cut off, slow) can never write again once another has taken over.

The token goes up by one at every takeover. A daemon that holds the lease fences its store
(`Store.fence`): from then on every write transaction checks, in its first round trip and
under the write lock, that the lease row still carries this token and has not expired
(`fedhpc_fence`), and fails with `Fenced` otherwise. Dispatch writes its intent (the attempt
row) before it submits a job, and the bridge marks a delivery started before it resumes an
agent: both are write transactions, so a fenced former leader reaches neither side effect.
On SQLite (one file, one daemon by the file lock) there is no lease: `acquire` answers a
token of 0 and nothing is fenced."""

from __future__ import annotations

from dataclasses import dataclass

from fedhpc.store.db import Store
from fedhpc.store.engine import Fenced
from fedhpc.store.lease_reads import HOLDER

__all__ = ["LEASE", "Fenced", "Lease", "acquire", "holder_of", "release", "renew"]

# The lease of the daemon's single loops: collector, control cycle, placer, bridge.
LEASE = "daemon"

# Made on first use (IF NOT EXISTS / OR REPLACE, under the write lock): service bookkeeping
# outside the numbered schema, as fedhpc_schema is. FH001: this token no longer leads.
_DDL = """
CREATE TABLE IF NOT EXISTS fedhpc_lease (
    name TEXT COLLATE "C" PRIMARY KEY,
    holder TEXT NOT NULL,
    token BIGINT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
CREATE OR REPLACE FUNCTION fedhpc_fence(lease text, mine bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM fedhpc_lease
                   WHERE name = lease AND token = mine AND expires_at > now()) THEN
        RAISE EXCEPTION 'fedhpc: lease % with token % is no longer held', lease, mine
            USING ERRCODE = 'FH001';
    END IF;
END $$;
"""


@dataclass(frozen=True, slots=True)
class Lease:
    """A lease this process holds: its name, holder id, fencing token and length."""

    name: str
    holder: str
    token: int
    ttl_s: float


async def acquire(store: Store, holder: str, *, ttl_s: float, name: str = LEASE) -> Lease | None:
    """Take the lease when it is free, expired or already `holder`'s (a new token on every
    takeover), and fence the store with it; None while another holds it unexpired."""
    if store.dialect != "postgresql":
        return Lease(name, holder, 0, ttl_s)
    async with store.transaction(fenced=False) as tx:
        await tx.conn.execute(_DDL)  # no parameters: one script
        rows = await tx.fetch(HOLDER, (name,))
        if rows and rows[0]["live"] and rows[0]["holder"] != holder:
            return None
        token = int(rows[0]["token"]) + 1 if rows else 1
        await tx.execute(
            "INSERT INTO fedhpc_lease (name, holder, token, expires_at) "
            "VALUES (?, ?, ?, now() + make_interval(secs => ?)) ON CONFLICT (name) DO UPDATE "
            "SET holder = excluded.holder, token = excluded.token, "
            "expires_at = excluded.expires_at",
            (name, holder, token, ttl_s),
        )
    store.fence(name, token)
    return Lease(name, holder, token, ttl_s)


async def renew(store: Store, lease: Lease) -> bool:
    """Extend the lease if its token still leads (even after it lapsed, when nobody took it
    meanwhile: then nobody else acted); False once another daemon took over."""
    if lease.token == 0:
        return True
    async with store.transaction(fenced=False) as tx:
        n = await tx.execute(
            "UPDATE fedhpc_lease SET expires_at = now() + make_interval(secs => ?) "
            "WHERE name = ? AND token = ?",
            (lease.ttl_s, lease.name, lease.token),
        )
    return n > 0


async def release(store: Store, lease: Lease) -> None:
    """End the lease now if it is still this token's (a daemon stopping: the next one need
    not wait for it to lapse)."""
    if lease.token == 0:
        return
    async with store.transaction(fenced=False) as tx:
        await tx.execute(
            "UPDATE fedhpc_lease SET expires_at = now() WHERE name = ? AND token = ?",
            (lease.name, lease.token),
        )


async def holder_of(store: Store, name: str = LEASE) -> dict[str, object] | None:
    """Who holds the lease: {holder, token, live}, or None (SQLite, or never taken)."""
    return await store.lease_holder(name)
