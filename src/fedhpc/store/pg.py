"""The store on PostgreSQL: psycopg 3 connections from a pool, `?` marks as psycopg's, writers
serialized by one advisory lock, and the versioned schema (store/schema_pg.py)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import psycopg
import structlog
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from fedhpc.store.engine import Dialect, Fenced, Row, StoreUnavailable
from fedhpc.store.schema import SCHEMA_VERSION
from fedhpc.store.schema_pg import BASELINE, BASELINE_VERSION, MIGRATIONS_PG

__all__ = ["WRITE_LOCK", "PgConn", "PgDatabase", "PgRow", "placeholders", "redacted"]

# Every write transaction of every fedhpc process on one database takes this advisory lock
# first (released at COMMIT or ROLLBACK): writers run one at a time, as SQLite's BEGIN
# IMMEDIATE makes them. So an event's seq is given and committed before the next writer's
# (a reader's cursor never passes a seq a slower transaction has yet to commit), and a
# transaction's read-then-write (an idempotency key, a cursor) sees no other writer between.
WRITE_LOCK = 0x66656468_7063  # "fedhpc"


_IDLE = psycopg.pq.TransactionStatus.IDLE
_LEASE_NAME = re.compile(r"[a-z][a-z0-9_]{0,62}")


class PgRow:
    """A row by position or by column name, as sqlite3.Row reads."""

    __slots__ = ("_names", "_values")

    def __init__(self, values: Sequence[Any], names: dict[str, int]) -> None:
        self._values = values
        self._names = names

    def __getitem__(self, key: int | str, /) -> Any:
        return self._values[self._names[key] if isinstance(key, str) else key]

    def keys(self) -> list[str]:
        return list(self._names)


def _row_factory(cursor: Any) -> Callable[[Sequence[Any]], PgRow]:
    names = {c.name: i for i, c in enumerate(cursor.description or ())}
    return lambda values: PgRow(values, names)


@lru_cache(maxsize=2048)
def placeholders(sql: str) -> str:
    """`sql` with each `?` outside quoted text as psycopg's `%s`, and every `%` doubled
    (psycopg reads `%` anywhere in a statement with parameters as a mark). The store's
    statements are fixed text: values only ever arrive as parameters."""
    out: list[str] = []
    quote = ""
    for ch in sql:
        if ch == "%":
            out.append("%%")
        elif quote:
            out.append(ch)
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
            out.append(ch)
        else:
            out.append("%s" if ch == "?" else ch)
    return "".join(out)


def redacted(url: str) -> str:
    """The URL without its password (for status lines and logs)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


log = structlog.get_logger(__name__)

POOL_WAIT_S = 10.0  # with the server gone, a read answers `store_unavailable` after this


def _unavailable(exc: Exception) -> StoreUnavailable:
    said = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
    return StoreUnavailable(f"the store's PostgreSQL server is out of reach: {said}")


@contextmanager
def unreachable_as_typed() -> Iterator[None]:
    """A lost or refused connection (the server stopped, restarting, the network), or no
    pooled connection within the pool's wait, raised as `StoreUnavailable`: a transient,
    typed answer, never an `internal` one."""
    try:
        yield
    except (psycopg.OperationalError, PoolTimeout) as exc:
        raise _unavailable(exc) from exc


class PgConn:
    """One pooled connection inside a write transaction, as a `Conn`."""

    dialect: Dialect = "postgresql"

    def __init__(self, raw: psycopg.AsyncConnection[Any], db: PgDatabase) -> None:
        self.raw = raw
        self.db = db

    async def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        cur = await self.raw.execute(placeholders(sql), tuple(params))
        return cur.rowcount

    async def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        cur = await self.raw.execute(placeholders(sql), tuple(params))
        return list(await cur.fetchall())

    async def run_many(self, sql: str, params: Iterable[Sequence[Any]]) -> None:
        async with self.raw.cursor() as cur:
            await cur.executemany(placeholders(sql), [tuple(p) for p in params])


class PgDatabase:
    """A pool of connections to one PostgreSQL database holding one fedhpc store."""

    def __init__(self, pool: AsyncConnectionPool[Any], url: str) -> None:
        self.pool = pool
        self.url = url
        # One writer and one reader held from the pool, as the SQLite store has its two
        # connections: taking a pooled connection per statement costs about 0.2 ms, four
        # times the statement (measured: benchmarks/store_engines.py). Reads that find the
        # reader busy take another from the pool.
        self._held: dict[str, psycopg.AsyncConnection[Any]] = {}
        self._writing = anyio.Lock()
        self._reading = anyio.Lock()

    @classmethod
    async def open(
        cls, url: str, *, max_size: int = 8, migrate: bool = True, idle_s: float | None = None
    ) -> PgDatabase:
        """With `idle_s`, the server ends a session of this pool that sits inside a
        transaction longer than that (idle_in_transaction_session_timeout): a daemon paused
        mid-transaction (SIGSTOP, a frozen VM) releases the write lock within `idle_s` instead
        of holding every other process's writes forever."""
        kwargs: dict[str, Any] = {"autocommit": True, "row_factory": _row_factory}
        if idle_s is not None:
            ms = max(1, int(idle_s * 1000))
            kwargs["options"] = f"-c idle_in_transaction_session_timeout={ms}"
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            url,
            min_size=1,
            max_size=max_size,
            open=False,
            kwargs=kwargs,
            name="fedhpc-store",
            timeout=POOL_WAIT_S,  # a request waits this long for a connection, then is told
            check=AsyncConnectionPool.check_connection,  # none the server ended (a restart)
        )
        await pool.open(wait=True, timeout=30)
        db = cls(pool, url)
        try:
            if migrate:
                await db.migrate()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await pool.close()
            raise
        return db

    async def close(self) -> None:
        try:
            for conn in self._held.values():
                await self.pool.putconn(conn)
            self._held.clear()
        finally:
            await self.pool.close()

    async def _conn(self, role: str) -> psycopg.AsyncConnection[Any]:
        """The held connection for `role`, replaced from the pool when it broke."""
        conn = self._held.get(role)
        if conn is not None and (
            conn.closed or conn.broken or conn.info.transaction_status != _IDLE
        ):  # broken, or left mid-statement by a cancelled task: never reused
            del self._held[role]
            await conn.close()
            await self.pool.putconn(conn)  # the pool discards a closed connection
            conn = None
        if conn is None:
            conn = self._held[role] = await self.pool.getconn()
        return conn

    async def read(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """A read outside any transaction: it sees the last commit of every process."""
        with unreachable_as_typed():
            if self._reading.locked():
                async with self.pool.connection() as conn:
                    cur = await conn.execute(placeholders(sql), tuple(params))
                    return list(await cur.fetchall())
            async with self._reading:
                for retry in (True, False):
                    conn = await self._conn("reader")
                    try:
                        cur = await conn.execute(placeholders(sql), tuple(params))
                        return list(await cur.fetchall())
                    except psycopg.OperationalError:
                        # A held connection the server ended (it restarted): a read is asked
                        # again once on a new one; the second failure is the server's state.
                        if not retry or not conn.broken:
                            raise
                        log.info("the store's connection was lost: reading again", role="reader")
                raise AssertionError("unreachable")  # the loop returns or raises

    @asynccontextmanager
    async def transaction(self, fence: tuple[str, int] | None = None) -> AsyncIterator[PgConn]:
        """One write transaction under the write lock; with `fence` (lease name, token), only
        while that token leads (store/lease.py), else `Fenced` before anything is written."""
        begin = f"BEGIN; SELECT pg_advisory_xact_lock({WRITE_LOCK})"
        if fence is not None:
            name, token = fence
            if not _LEASE_NAME.fullmatch(name):
                raise ValueError(f"not a lease name: {name!r}")
            begin += f"; SELECT fedhpc_fence('{name}', {int(token)})"
        async with self._writing:
            conn = await self._begin(begin)
            try:
                yield PgConn(conn, self)
            except psycopg.OperationalError as exc:  # the server went away mid-transaction
                with anyio.CancelScope(shield=True):
                    await self._abandon(conn)
                raise _unavailable(exc) from exc
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await self._abandon(conn)
                raise
            else:
                with anyio.CancelScope(shield=True), unreachable_as_typed():
                    await conn.execute("COMMIT")

    async def _begin(self, begin: str) -> psycopg.AsyncConnection[Any]:
        """The writer, in a transaction begun by `begin` (BEGIN, the lock and the fence in one
        round trip: fixed text, no parameter). A held connection the server ended (it
        restarted) is replaced and the BEGIN sent once more: nothing was written on it."""
        for retry in (True, False):
            with unreachable_as_typed():
                conn = await self._conn("writer")
            try:
                await conn.execute(begin)
            except psycopg.Error as exc:
                with anyio.CancelScope(shield=True):
                    await self._abandon(conn)
                if exc.sqlstate == "FH001":
                    raise Fenced(exc.diag.message_primary or str(exc)) from None
                if not isinstance(exc, psycopg.OperationalError):
                    raise
                if not retry or not conn.broken:
                    raise _unavailable(exc) from exc
                log.info("the store's connection was lost: beginning again", role="writer")
            else:
                return conn
        raise AssertionError("unreachable")  # the loop returns or raises

    @staticmethod
    async def _abandon(conn: psycopg.AsyncConnection[Any]) -> None:
        try:
            await conn.execute("ROLLBACK")
        except psycopg.Error:  # the connection broke: the server rolls the transaction back
            await conn.close()

    async def schema_version(self) -> int:
        exists = await self.read("SELECT to_regclass('fedhpc_schema') IS NOT NULL")
        if not exists[0][0]:
            return 0  # a new database: nothing migrated yet
        rows = await self.read("SELECT coalesce(max(version), 0) FROM fedhpc_schema")
        return int(rows[0][0])

    async def migrate(self) -> tuple[int, int]:
        """Bring the schema to this fedhpc's version in one transaction (PostgreSQL's DDL is
        transactional: a failed step leaves the previous version); (from, to)."""
        async with self.transaction() as c:
            await c.raw.execute("CREATE TABLE IF NOT EXISTS fedhpc_schema (version integer)")
            rows = await c.rows("SELECT coalesce(max(version), 0) FROM fedhpc_schema")
            start = version = int(rows[0][0])
            if version > SCHEMA_VERSION:
                raise RuntimeError(
                    f"{redacted(self.url)} has schema {version}, "
                    f"newer than this fedhpc ({SCHEMA_VERSION})"
                )
            if version == 0:
                await c.raw.execute(BASELINE)  # no parameters: one script, several statements
                version = BASELINE_VERSION
            for n in range(version, SCHEMA_VERSION):
                await c.raw.execute(MIGRATIONS_PG[n - BASELINE_VERSION])
                version = n + 1
            if version != start:
                await c.run("DELETE FROM fedhpc_schema")
                await c.run("INSERT INTO fedhpc_schema (version) VALUES (?)", (version,))
        return start, version
