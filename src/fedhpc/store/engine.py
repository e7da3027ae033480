"""The store's engine seam: what a transaction's statements need of a database connection.

The store's SQL is written once with `?` placeholders; each engine runs it on its own driver
(SQLite: aiosqlite, here; PostgreSQL: psycopg 3, `store/pg.py`, which turns the marks into
psycopg's). Statements that differ between the engines (JSON fields, upserts with two
conflicts, the sequence of event seqs) come in two spellings: SQLite's where they are used,
PostgreSQL's in `store/sql_pg.py`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal, Protocol

import aiosqlite

from fedhpc.errors import TransientError

__all__ = ["Conn", "Dialect", "Fenced", "Row", "SqliteConn", "StoreUnavailable"]

Dialect = Literal["sqlite", "postgresql"]


class Fenced(TransientError):
    """This process's lease on the store lapsed or passed to another daemon (store/lease.py):
    it may not write."""

    default_hint = (
        "Another fedhpc daemon leads this store now; this one stops. Its clients reconnect "
        "to the leader."
    )


class StoreUnavailable(TransientError):
    """The store's database server is out of reach (stopped, restarting, the network): the
    daemon keeps running, answers this, and works again once the server is back."""

    code = "store_unavailable"
    default_hint = (
        "The daemon's PostgreSQL store does not answer (restarting or down); the daemon retries "
        "by itself and answers again once it is back. `fedhpc store status` checks it."
    )


class Row(Protocol):
    """A result row: its fields by position or by column name (sqlite3.Row, pg.PgRow)."""

    def __getitem__(self, key: int | str, /) -> Any: ...


class Conn(Protocol):
    """One connection inside a write transaction."""

    dialect: Dialect

    async def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement; the rows it changed."""
        ...

    async def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """Run one statement (a SELECT, or a write with RETURNING); its rows."""
        ...

    async def run_many(self, sql: str, params: Iterable[Sequence[Any]]) -> None:
        """Run one statement once per parameter tuple."""
        ...


class SqliteConn:
    """The SQLite store's writer connection (aiosqlite), as a `Conn`."""

    dialect: Dialect = "sqlite"

    def __init__(self, raw: aiosqlite.Connection) -> None:
        self.raw = raw

    async def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        cur = await self.raw.execute(sql, params)
        return cur.rowcount

    async def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return list(await self.raw.execute_fetchall(sql, params))  # one round trip

    async def run_many(self, sql: str, params: Iterable[Sequence[Any]]) -> None:
        await self.raw.executemany(sql, params)
