"""The store's tables as a whole: each one's columns in a fixed order, how many rows it holds,
and a page of its rows in a stable order (`fedhpc store export`, store/dump.py). A mixin of
`Store` (store/db.py), on either engine."""

from __future__ import annotations

from typing import Any

from fedhpc.store.reads import Reads

__all__ = ["COLUMNS", "TableReads"]

# Every table a store holds (not `archiving`, a marker only held inside a transaction), in an
# order that writes each row's parents first, with every column in a fixed order.
COLUMNS: dict[str, tuple[str, ...]] = {
    "groups": ("id", "created_at", "state", "round", "body", "dedupe", "owner"),
    "tasks": (
        "id", "idempotency_key", "group_id", "created_at", "updated_at", "state", "body",
        "dedupe", "current_site", "owner",
    ),
    "attempts": (
        "task_id", "n", "site", "partition", "job_name", "job_id", "state", "created_at",
        "updated_at", "body",
    ),
    "transfers": ("id", "idempotency_key", "created_at", "updated_at", "state", "body", "owner"),
    "continuations": ("id", "subject", "runtime", "created_at", "body", "owner"),
    "events": ("seq", "id", "kind", "subject", "created_at", "payload"),
    "consumers": ("name", "cursor", "updated_at"),
    "consumed": ("consumer", "event_id"),
    "deliveries": (
        "id", "event_id", "continuation_id", "state", "attempts", "next_at", "updated_at", "body",
        "owner",
    ),
    "sessions": ("cwd", "runtime", "session_id", "reported_at", "body"),
    "bindings": ("tool_use_id", "session_id", "reported_at", "body"),
    "snapshots": ("seq", "site", "collected_at", "health", "state"),
}  # fmt: skip

# Each table's rows in a stable order: groups in the order they were written (both engines
# have a rowid), the rest by their primary key.
_ORDER = {
    "groups": "rowid",
    "attempts": "task_id, n",
    "events": "seq",
    "consumers": "name",
    "consumed": "consumer, event_id",
    "sessions": "runtime, cwd",
    "bindings": "tool_use_id",
    "snapshots": "seq",
}


class TableReads(Reads):
    """Whole tables, by name (one of COLUMNS): their sizes and their rows a page at a time."""

    async def count(self, table: str) -> int:
        """How many rows `table` holds."""
        _known(table)
        rows = await self._all(f"SELECT count(*) AS n FROM {table}")  # noqa: S608 (known names)
        return int(rows[0]["n"])

    async def table_page(self, table: str, *, offset: int, limit: int) -> list[list[Any]]:
        """`limit` rows of `table` after its first `offset`, in its stable order, each row's
        values in COLUMNS order."""
        cols = COLUMNS[_known(table)]
        rows = await self._all(
            f"SELECT {', '.join(cols)} FROM {table} "  # noqa: S608 (known names only)
            f"ORDER BY {_ORDER.get(table, 'id')} LIMIT ? OFFSET ?",
            (limit, offset),
        )
        return [[r[i] for i in range(len(cols))] for r in rows]


def _known(table: str) -> str:
    if table not in COLUMNS:
        raise ValueError(f"no table {table!r}")
    return table
