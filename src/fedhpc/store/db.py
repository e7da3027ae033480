"""The daemon's store and its transactions: SQLite (WAL, migrations; one writer: the daemon) or,
with a `postgresql://` URL, PostgreSQL (store/pg.py)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiosqlite
import anyio

from fedhpc.store import sql_pg
from fedhpc.store.engine import Row, SqliteConn
from fedhpc.store.lease_reads import LeaseReads
from fedhpc.store.log_reads import LogReads
from fedhpc.store.owners import OwnerReads
from fedhpc.store.pages import ListingReads
from fedhpc.store.reads import WRITING, DeliveryReads, GroupReads, HistoryReads
from fedhpc.store.schema import MIGRATIONS, SCHEMA_VERSION
from fedhpc.store.tables import TableReads
from fedhpc.store.tx import AS_SUBMITTED, Tx

if TYPE_CHECKING:
    from fedhpc.store.pg import PgDatabase

__all__ = ["READER_CACHE_SIZE", "WAIT_SAMPLES", "Store", "Tx", "WaitSample"]

# The read-only connection's page cache (SQLite's cache_size: negative = KiB).
READER_CACHE_SIZE = -1024

# The newest completed attempts as the wait estimators read them (WaitSample's fields, in
# order): walks the index attempts_state_updated (schema 8), no sort, and reads only these few
# fields of each body. A body without a shape field reads as Shape's default for it (0 GPUs,
# 1 CPU, 1 node), as the attempt's Shape would have been.
WAIT_SAMPLES = """
SELECT site, partition, coalesce(json_extract(body, '$.shape.gpus'), 0),
    coalesce(json_extract(body, '$.shape.cpus'), 1),
    coalesce(json_extract(body, '$.shape.nodes'), 1), json_extract(body, '$.wait_s'),
    json_extract(body, '$.started_at'), json_extract(body, '$.ended_at'),
    json_extract(body, '$.predicted_waits')
FROM attempts WHERE state = 'completed' ORDER BY updated_at DESC LIMIT ?
"""

_PENDING_BUDGETS = (
    "SELECT id, json_extract(body, '$.request.adaptation') AS adaptation, "
    "json_extract(body, '$.replacements_used') AS used FROM tasks "
    "WHERE id IN (SELECT task_id FROM attempts WHERE state = 'pending')"
)


@dataclass(frozen=True, slots=True)
class WaitSample:
    """A completed attempt's queue wait: where, at which size, when, and what each estimator
    predicted for it (times as stored: ISO 8601 text, or None)."""

    site: str
    partition: str
    gpus: int
    cpus: int
    nodes: int
    wait_s: float | None
    started_at: str | None
    ended_at: str | None
    predicted_waits: dict[str, float]


class Store(
    LogReads,
    GroupReads,
    ListingReads,
    DeliveryReads,
    HistoryReads,
    OwnerReads,
    TableReads,
    LeaseReads,
):
    """SQLite: one connection, one writer, and a reader for REST requests (`quick_reads`).
    PostgreSQL: a pool (`pg`). Reads may run any time; writes go through `transaction()`."""

    def __init__(
        self, conn: aiosqlite.Connection | None, path: Path, *, pg: PgDatabase | None = None
    ) -> None:
        self._conn = conn  # type: ignore[assignment]  # None only beside `pg`
        self._quick: aiosqlite.Connection | None = None
        self._pg = pg
        self._fence: tuple[str, int] | None = None
        self.dialect = "postgresql" if pg is not None else "sqlite"
        self.path = path
        self._write = anyio.Lock()

    @classmethod
    async def open_url(
        cls, url: str, *, migrate: bool = True, idle_s: float | None = None
    ) -> Store:
        """The store in the PostgreSQL database at `url` (postgresql://...), its schema
        brought to this fedhpc's version unless `migrate` is False; `idle_s`: how long the
        server lets one of its sessions sit inside a transaction (pg.PgDatabase.open)."""
        from fedhpc.store.pg import PgDatabase  # psycopg loads only for a PostgreSQL store

        return cls(None, Path(), pg=await PgDatabase.open(url, migrate=migrate, idle_s=idle_s))

    @property
    def location(self) -> str:
        """Where the store is (a file, or the database URL without its password)."""
        if self._pg is None:
            return str(self.path)
        from fedhpc.store.pg import redacted  # psycopg loads only for a PostgreSQL store

        return redacted(self._pg.url)

    def url_for_listen(self) -> str | None:
        """PostgreSQL: the database URL, for the connection that LISTENs for other daemons'
        events (store/listen.py); None on SQLite."""
        return self._pg.url if self._pg is not None else None

    @classmethod
    async def open_readonly(cls, path: Path) -> Store:
        """A reader for people's tools while the daemon is down; it never writes."""
        if not await anyio.Path(path).exists():
            raise FileNotFoundError(path)
        conn = await aiosqlite.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
        conn.row_factory = aiosqlite.Row
        return cls(conn, path)

    @classmethod
    async def open(cls, path: Path) -> Store:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        conn = await aiosqlite.connect(path, isolation_level=None)
        conn.row_factory = aiosqlite.Row
        # WAL: readers never block the writer. synchronous=NORMAL keeps every committed
        # transaction across a process crash (kill -9); only a power loss can drop the last ones.
        await conn.execute("PRAGMA journal_mode=WAL")
        await conn.execute("PRAGMA synchronous=NORMAL")
        await conn.execute("PRAGMA busy_timeout=5000")
        await conn.execute("PRAGMA foreign_keys=ON")
        store = cls(conn, path)
        try:
            await store._migrate()
            store._quick = await _reader(path)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await conn.close()
            raise
        await anyio.Path(path).chmod(0o600)
        return store

    async def _migrate(self) -> None:
        version = await self.schema_version()
        if version > SCHEMA_VERSION:
            raise RuntimeError(
                f"{self.path} has schema {version}, newer than this fedhpc ({SCHEMA_VERSION})"
            )
        for n in range(version, SCHEMA_VERSION):
            # One transaction per step: a crash mid-migration leaves the previous version.
            await self._conn.executescript(
                f"BEGIN IMMEDIATE;\n{MIGRATIONS[n]}\nPRAGMA user_version = {n + 1};\nCOMMIT;"
            )

    async def migrate(self) -> tuple[int, int]:
        """Bring the schema to this fedhpc's version (SQLite's open already did); (from, to)."""
        if self._pg is not None:
            return await self._pg.migrate()
        version = await self.schema_version()
        await self._migrate()
        return version, await self.schema_version()

    async def schema_version(self) -> int:
        if self._pg is not None:
            return await self._pg.schema_version()
        rows = await self._all("PRAGMA user_version")
        return int(rows[0][0]) if rows else 0

    async def close(self) -> None:
        if self._pg is not None:
            await self._pg.close()
            return
        try:
            if self._quick is not None:
                await self._quick.close()
        finally:
            await self._conn.close()

    @property
    def lease_token(self) -> int | None:
        """The lease token this store's writes are fenced with (None: not leading a store
        on PostgreSQL)."""
        return self._fence[1] if self._fence is not None else None

    def fence(self, lease: str, token: int) -> None:
        """From now on every write transaction runs only while this lease token leads the
        store (store/lease.py), else fails with `Fenced` before writing anything."""
        self._fence = (lease, token)

    @asynccontextmanager
    async def transaction(self, *, fenced: bool = True) -> AsyncIterator[Tx]:
        """One write transaction; `fenced=False` only for the lease's own bookkeeping."""
        if self._pg is not None:
            fence = self._fence if fenced else None
            async with self._write, self._pg.transaction(fence) as conn:
                writing = WRITING.set(conn)  # this task's reads see its own writes
                try:
                    yield Tx(conn)
                finally:
                    WRITING.reset(writing)
            return
        async with self._write:
            await self._conn.execute("BEGIN IMMEDIATE")
            writing = WRITING.set(self._conn)  # this task's reads see its own writes
            try:
                yield Tx(SqliteConn(self._conn))
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await self._conn.execute("ROLLBACK")
                raise
            else:
                with anyio.CancelScope(shield=True):
                    await self._conn.execute("COMMIT")
            finally:
                WRITING.reset(writing)

    # -- tasks ----------------------------------------------------------------------------
    async def get_task(self, task_id: str) -> dict[str, Any] | None:
        rows = await self._all("SELECT * FROM tasks WHERE id = ?", (task_id,))
        return _task(rows[0]) if rows else None

    async def task_by_key(self, key: str) -> dict[str, Any] | None:
        rows = await self._all("SELECT * FROM tasks WHERE idempotency_key = ?", (key,))
        return _task(rows[0]) if rows else None

    async def attempts(self, task_id: str) -> list[dict[str, Any]]:
        rows = await self._all("SELECT * FROM attempts WHERE task_id = ? ORDER BY n", (task_id,))
        return [_attempt(r) for r in rows]

    async def tasks_left_open(self, states: Sequence[str]) -> list[str]:
        """Ids of tasks in `states` none of whose attempts is in `states`: a task whose last
        attempt ended while its own end was never written (a daemon killed between)."""
        marks = ",".join("?" * len(states))
        rows = await self._all(
            f"SELECT id FROM tasks t WHERE t.state IN ({marks}) AND NOT EXISTS "  # noqa: S608
            f"(SELECT 1 FROM attempts a WHERE a.task_id = t.id AND a.state IN ({marks}))",
            (*states, *states),
        )
        return [str(r["id"]) for r in rows]

    async def tasks_completed_open(self, states: Sequence[str]) -> list[str]:
        """Ids of tasks in `states` with a completed attempt: a hedged copy's end the leader
        saved before it was killed, while another copy still waits (`finish_ends`)."""
        marks = ",".join("?" * len(states))
        rows = await self._all(
            f"SELECT id FROM tasks t WHERE t.state IN ({marks}) AND EXISTS "  # noqa: S608
            "(SELECT 1 FROM attempts a WHERE a.task_id = t.id AND a.state = ?)",
            (*states, "completed"),
        )
        return [str(r["id"]) for r in rows]

    async def attempts_in(
        self, states: Sequence[str], *, site: str | None = None
    ) -> list[dict[str, Any]]:
        """Attempts in `states` (at `site` only, when given), by task and number."""
        marks = ",".join("?" * len(states))
        where, args = f"state IN ({marks})", tuple(states)
        if site is not None:
            where, args = f"{where} AND site = ?", (*args, site)
        rows = await self._all(
            f"SELECT * FROM attempts WHERE {where} ORDER BY task_id, n",  # noqa: S608
            args,
        )
        return [_attempt(r) for r in rows]

    async def pending_budgets(self) -> dict[str, dict[str, Any]]:
        """Per task with an attempt pending: its adaptation policy (a dict, or None) and its
        re-placements used, a few fields in SQL (never the bodies): what adapt_pending checks
        before it loads a task."""
        rows = await self._all(self._pick(_PENDING_BUDGETS, sql_pg.PENDING_BUDGETS))
        return {
            str(r["id"]): {
                "adaptation": json.loads(r["adaptation"]) if r["adaptation"] else None,
                "used": int(r["used"] or 0),
            }
            for r in rows
        }

    async def wait_samples(self, limit: int = 2000) -> list[WaitSample]:
        """The newest `limit` completed attempts as the learned wait estimator and the
        estimators' error record read them: a few fields, never the bodies (each body read in
        costs some kilobytes, and every control cycle reads up to `limit` of them)."""
        rows = await self._all(self._pick(WAIT_SAMPLES, sql_pg.WAIT_SAMPLES), (limit,))
        # Every control cycle: made on a worker thread, so the event loop takes the GIL back
        # every switch interval and answers REST requests meanwhile.
        return await anyio.to_thread.run_sync(_samples, rows)

    async def list_tasks(
        self, *, state: str | None = None, group_id: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        sql, params = "SELECT * FROM tasks", []
        where = []
        if state:
            where.append("state = ?")
            params.append(state)
        if group_id:
            where.append("group_id = ?")
            params.append(group_id)
        if where:
            sql += " WHERE " + " AND ".join(where)
        rows = await self._all(sql + " ORDER BY created_at DESC, id LIMIT ?", [*params, limit])
        return [_task(r) for r in rows]

    async def task_by_dedupe(self, dedupe: str, since: str) -> dict[str, Any] | None:
        """The newest task with this caller-and-request digest created at `since` or later."""
        rows = await self._all(
            "SELECT * FROM tasks WHERE dedupe = ? AND created_at >= ? "
            "ORDER BY created_at DESC LIMIT 1",
            (dedupe, since),
        )
        return _task(rows[0]) if rows else None

    async def queued_tasks(
        self, limit: int, *, after: tuple[str, str] = ("", ""), skip_groups: Sequence[str] = ()
    ) -> list[dict[str, Any]]:
        """Tasks accepted but not yet handed to a scheduler, oldest first, after the
        (created_at, id) of the last one already seen, leaving out the children of
        `skip_groups` as submitted (a child that replan changed is read)."""
        skip = ""
        if skip_groups:
            marks = ",".join("?" * len(skip_groups))
            same = self._pick(AS_SUBMITTED, sql_pg.AS_SUBMITTED)
            skip = f" AND NOT (coalesce(group_id IN ({marks}), false) AND {same})"
        rows = await self._all(
            "SELECT * FROM tasks WHERE state = 'queued' AND (created_at > ? OR "  # noqa: S608
            f"(created_at = ? AND id > ?)){skip} ORDER BY created_at, id LIMIT ?",
            (after[0], after[0], after[1], *skip_groups, limit),
        )
        return [_task(r) for r in rows]


async def _reader(path: Path) -> aiosqlite.Connection:
    """The connection of `quick_reads`: read-only (query_only), on its own thread, with a small
    page cache (1 MiB: the dashboard's polling reads through it, and SQLite's default of 2 MiB
    per connection is kept for as long as the daemon runs)."""
    reader = await aiosqlite.connect(path, isolation_level=None)
    try:
        reader.row_factory = aiosqlite.Row
        await reader.execute("PRAGMA query_only=ON")
        await reader.execute("PRAGMA busy_timeout=5000")
        await reader.execute(f"PRAGMA cache_size={READER_CACHE_SIZE}")
    except BaseException:
        with anyio.CancelScope(shield=True):
            await reader.close()  # else its thread outlives the failed open
        raise
    return reader


def _samples(rows: list[Row]) -> list[WaitSample]:
    return [_sample(r) for r in rows]


def _sample(r: Row) -> WaitSample:
    return WaitSample(
        site=r[0],
        partition=r[1],
        gpus=r[2],
        cpus=r[3],
        nodes=r[4],
        wait_s=r[5],
        started_at=r[6],
        ended_at=r[7],
        predicted_waits=json.loads(r[8]) if r[8] else {},
    )


def _attempt(row: Row) -> dict[str, Any]:
    return {
        "task_id": row["task_id"],
        "n": row["n"],
        "site": row["site"],
        "partition": row["partition"],
        "job_name": row["job_name"],
        "job_id": row["job_id"],
        "state": row["state"],
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
        "body": json.loads(row["body"]),
    }


def _task(row: Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "idempotency_key": row["idempotency_key"],
        "group_id": row["group_id"],
        "state": row["state"],
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
        "body": json.loads(row["body"]),
        "owner": row["owner"],
    }
