"""A whole store as JSON lines and back, between engines: a person's SQLite history moved into a
team's PostgreSQL store (`fedhpc store export` / `fedhpc store import`).

The file's first line says the schema version and the newest event seq ever given; then one
line per row, `{"t": table, "r": [values in COLUMNS order]}`, parents before children. Rows
keep their keys and event seqs, so consumers' cursors, deliveries and continuations still
point at what they pointed at."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

from fedhpc.errors import UsageError
from fedhpc.store.db import Store
from fedhpc.store.tables import COLUMNS
from fedhpc.store.tx import Tx

__all__ = ["COLUMNS", "DumpError", "export_rows", "import_rows"]

FORMAT = "fedhpc-store/1"

_PAGE = 2000


class DumpError(UsageError):
    """The file is not a store export this store can take, or the store is not empty."""

    default_hint = (
        "Export with `fedhpc store export FILE` and import into a new, empty store of the "
        "same fedhpc version (`FEDHPC_STORE_URL` names it)."
    )


async def export_rows(store: Store) -> AsyncIterator[str]:
    """The store as lines (each ending in a newline), read a page at a time."""
    header = {
        "format": FORMAT,
        "schema": await store.schema_version(),
        "last_seq": await store.last_seq(),
    }
    yield json.dumps(header) + "\n"
    for table in COLUMNS:
        offset = 0
        while True:
            rows = await store.table_page(table, offset=offset, limit=_PAGE)
            for values in rows:
                yield json.dumps({"t": table, "r": values}) + "\n"
            if len(rows) < _PAGE:
                break
            offset += _PAGE


def _parse(lines: Iterable[str]) -> tuple[dict[str, Any], Iterator[tuple[str, list[Any]]]]:
    it = iter(lines)
    try:
        header = json.loads(next(it))
    except (StopIteration, json.JSONDecodeError) as exc:
        raise DumpError("not a fedhpc store export (no header line)") from exc
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise DumpError(f"not a fedhpc store export (its first line is not {FORMAT!r})")

    def rows() -> Iterator[tuple[str, list[Any]]]:
        for n, line in enumerate(it, start=2):
            if not line.strip():
                continue
            item = json.loads(line)
            table, values = item.get("t"), item.get("r")
            if table not in COLUMNS or not isinstance(values, list):
                raise DumpError(f"line {n}: no table {table!r} in a store")
            if len(values) != len(COLUMNS[table]):
                raise DumpError(f"line {n}: {table} has {len(COLUMNS[table])} columns")
            yield table, values

    return header, rows()


async def import_rows(store: Store, lines: Iterable[str]) -> dict[str, int]:
    """Write an export into this store, which must be empty and at the export's schema
    version; in one transaction (a failure leaves the store empty). Rows written per table."""
    header, rows = _parse(lines)
    schema = await store.schema_version()
    if header.get("schema") != schema:
        raise DumpError(
            f"the export has schema {header.get('schema')}, this store {schema}: "
            "export and import with the same fedhpc version"
        )
    counts = dict.fromkeys(COLUMNS, 0)
    async with store.transaction() as tx:
        for table in ("tasks", "groups", "events", "snapshots"):
            found = await tx.fetch(f"SELECT count(*) FROM {table}")  # noqa: S608 (fixed names)
            if int(found[0][0]):
                raise DumpError(f"this store is not empty ({table} has rows): import into a new")
        for table, values in rows:
            cols = COLUMNS[table]
            await tx.execute(
                f"INSERT INTO {table} ({', '.join(cols)}) "  # noqa: S608 (fixed names only)
                f"VALUES ({', '.join('?' * len(cols))})",
                values,
            )
            counts[table] += 1
        await _sequences(tx, int(header.get("last_seq") or 0))
    return counts


async def _sequences(tx: Tx, last_seq: int) -> None:
    """The next event seq after the export's newest ever given (archived ones included), and
    the next snapshot seq and group rowid after the imported ones."""
    if tx.dialect == "postgresql":
        await tx.fetch(
            "SELECT setval('events_seq_seq', greatest(?, (SELECT coalesce(max(seq), 0) "
            "FROM events), 1), greatest(?, (SELECT coalesce(max(seq), 0) FROM events)) > 0)",
            (last_seq, last_seq),
        )
        for table, col in (("snapshots", "seq"), ("groups", "rowid")):
            await tx.fetch(
                f"SELECT setval(pg_get_serial_sequence('{table}', '{col}'), "  # noqa: S608
                f"(SELECT coalesce(max({col}), 0) FROM {table}) + 1, false)"
            )
        return
    if last_seq > 0:  # AUTOINCREMENT already follows the imported rows' seqs
        await tx.execute(
            "UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = 'events'", (last_seq,)
        )
        await tx.execute(
            "INSERT INTO sqlite_sequence (name, seq) SELECT 'events', ? "
            "WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'events')",
            (last_seq,),
        )
