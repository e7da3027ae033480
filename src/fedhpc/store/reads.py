"""The store's reads of groups and of the bridge's continuations, deliveries and bindings:
mixins of `Store` (store/db.py). A read runs on the writer's connection (in order with the
writes), except while a REST request is answered (`quick_reads`): then on the reader's."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from typing import TYPE_CHECKING, Any

import aiosqlite

from fedhpc.store import sql_pg
from fedhpc.store.engine import Row
from fedhpc.store.tx import iso

if TYPE_CHECKING:
    from fedhpc.store.pg import PgDatabase

__all__ = ["WRITING", "DeliveryReads", "GroupReads", "HistoryReads", "Reads", "quick_reads"]

_QUICK: ContextVar[bool] = ContextVar("fedhpc_store_quick_reads", default=False)
# The connection of the transaction this task is in (SQLite: the writer; PostgreSQL: the
# transaction's pg.PgConn), so its reads see its own writes.
WRITING: ContextVar[object | None] = ContextVar("fedhpc_store_writing", default=None)


@contextmanager
def quick_reads() -> Iterator[None]:
    """The store's reads in this context (one REST request being answered: the daemon's guard)
    run on the reader: a second, read-only connection with its own thread. On the writer's
    they would queue behind the daemon's statements (a 1,000-child insert, a placement
    batch's saves, the 2,000-attempt history read every cycle); WAL lets the reader see the
    last commit meanwhile, never blocking or waiting for the writer. (On the event loop's own
    thread instead, a page of a group would hand the GIL back and forth once per row, and
    wait for it whenever another thread is busy: measured slower under load.)"""
    token = _QUICK.set(True)
    try:
        yield
    finally:
        _QUICK.reset(token)


class Reads:
    """The connections and the one read primitive the mixins share."""

    _conn: aiosqlite.Connection  # the writer: transactions and, outside `quick_reads`, reads
    _quick: aiosqlite.Connection | None  # reads in `quick_reads` (None: a read-only store)
    _pg: PgDatabase | None  # PostgreSQL's pool (then no `_conn` nor `_quick`)

    def _pick(self, sqlite: str, postgresql: str) -> str:
        """The statement in this store's engine's words."""
        return sqlite if self._pg is None else postgresql

    async def _all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        if self._pg is not None:
            writing = WRITING.get()
            if writing is not None and getattr(writing, "db", None) is self._pg:
                return await writing.rows(sql, params)  # type: ignore[attr-defined, no-any-return]
            return await self._pg.read(sql, params)
        quick = _QUICK.get() and WRITING.get() is not self._conn
        conn = self._quick if quick and self._quick is not None else self._conn
        # One round trip to the connection's thread (execute + fetchall + close would be three):
        # under CPU contention each hop waits for a scheduler slot.
        return list(await conn.execute_fetchall(sql, params))


class GroupReads(Reads):
    """A group, its children and their counts."""

    async def group_sites(self, group_id: str) -> list[str]:
        """The systems a group's children have attempts on."""
        rows = await self._all(
            "SELECT DISTINCT a.site FROM attempts a JOIN tasks t ON a.task_id = t.id "
            "WHERE t.group_id = ?",
            (group_id,),
        )
        return [str(r["site"]) for r in rows]

    async def group_children(
        self,
        group_id: str,
        *,
        after: str | None = None,
        limit: int | None = None,
        acting: Sequence[str] = (),
    ) -> list[dict[str, Any]]:
        """A group's children without their full bodies: per child its state, label, decision
        and current attempt (the accepted one, else the newest not superseded). With `after`
        or `limit`: one page, children in id order after the id `after`. With `acting` (the
        terminal states): only the children a control cycle may act on, those not in one of
        them or with an attempt still pending (the rest are never read)."""
        rows = await self._all(
            *children_query(
                group_id, after=after, limit=limit, acting=acting, pg=self._pg is not None
            )
        )
        out: dict[str, dict[str, Any]] = {}
        accepted: dict[str, int | None] = {}
        for r in rows:
            tid = str(r["id"])
            if (child := out.get(tid)) is None:
                name, decision, reasons, accepted[tid], relaxed = json.loads(r["task"])
                child = out[tid] = {
                    "id": tid,
                    "state": r["state"],
                    "name": name,
                    "decision": decision or "",
                    "reasons": reasons or [],
                    "relaxed": bool(relaxed),
                    "attempt": None,
                    "attempts": 0,
                    "index": _child_index(tid, str(r["key"])),
                }
            if r["n"] is None:
                continue
            child["attempts"] += 1
            superseded, pending_since, account, shape = json.loads(r["attempt"])
            current = r["n"] == accepted[tid] if accepted[tid] is not None else not superseded
            if current:
                child["attempt"] = {
                    "n": r["n"],
                    "site": r["site"],
                    "partition": r["partition"],
                    "job_id": r["job_id"],
                    "state": r["attempt_state"],
                    "account": account,
                    "pending_since": pending_since,
                    "shape": shape,
                }
        return sorted(out.values(), key=lambda c: int(c["index"]))

    async def group_summary(self, group_id: str) -> dict[str, Any]:
        """Counts for a whole group in SQL (no child loaded): per state, per site of the
        children's current attempts, and the first and last child id."""
        rows = await self._all(GROUP_SUMMARY, (group_id, group_id))
        counts = [r for r in rows if r["kind"] == "state"]
        return {
            "counts": {str(r["key"]): int(r["n"]) for r in counts},
            "sites": {str(r["key"]): int(r["n"]) for r in rows if r["kind"] == "site"},
            "first": min((str(r["first"]) for r in counts), default=""),
            "last": max((str(r["last"]) for r in counts), default=""),
        }

    async def group_counts(self, group_id: str) -> dict[str, int]:
        """How many of a group's children are in each state (the index alone, no body read)."""
        rows = await self._all(GROUP_COUNTS, (group_id,))
        return {str(r["state"]): int(r["n"]) for r in rows}

    async def get_group(self, group_id: str) -> dict[str, Any] | None:
        rows = await self._all("SELECT * FROM groups WHERE id = ?", (group_id,))
        return _group(rows[0]) if rows else None

    async def group_by_dedupe(self, dedupe: str, since: str) -> dict[str, Any] | None:
        rows = await self._all(
            "SELECT * FROM groups WHERE dedupe = ? AND created_at >= ? "
            "ORDER BY created_at DESC LIMIT 1",
            (dedupe, since),
        )
        return _group(rows[0]) if rows else None

    async def recent_groups(self, limit: int) -> list[str]:
        """The ids of the newest `limit` groups, newest first (in the order of the dashboard's
        group list, `ListingReads.group_page`); groups made in the same instant in the order
        they were written (rowid)."""
        rows = await self._all(
            "SELECT id FROM groups ORDER BY created_at DESC, rowid DESC LIMIT ?", (limit,)
        )
        return [str(r["id"]) for r in rows]

    async def groups_in(self, states: Sequence[str]) -> list[str]:
        marks = ",".join("?" * len(states))
        rows = await self._all(
            f"SELECT id FROM groups WHERE state IN ({marks}) ORDER BY id",  # noqa: S608
            tuple(states),
        )
        return [str(r["id"]) for r in rows]


class DeliveryReads(Reads):
    """What the bridge keeps: continuations, deliveries and the hook's tool-call bindings."""

    async def continuations_for(self, subjects: Sequence[str]) -> list[dict[str, Any]]:
        if not subjects:
            return []
        marks = ",".join("?" * len(subjects))
        rows = await self._all(
            f"SELECT * FROM continuations WHERE subject IN ({marks}) ORDER BY id",  # noqa: S608
            tuple(subjects),
        )
        return [
            {
                "id": r["id"],
                "subject": r["subject"],
                "runtime": r["runtime"],
                "created_at": r["created_at"],
                "body": json.loads(r["body"]),
            }
            for r in rows
        ]

    async def deliveries(
        self, *, states: Sequence[str] = (), limit: int = 1000, owner: str | None = None
    ) -> list[dict[str, Any]]:
        """Deliveries in `states` (all when empty); only `owner`'s when given (service mode)."""
        conds: list[str] = []
        params: list[Any] = []
        if states:
            conds.append(f"state IN ({','.join('?' * len(states))})")
            params.extend(states)
        if owner is not None:
            conds.append("owner = ?")
            params.append(owner)
        where = " WHERE " + " AND ".join(conds) if conds else ""  # fixed clauses only
        sql = f"SELECT * FROM deliveries{where}"  # noqa: S608
        rows = await self._all(sql + " ORDER BY next_at, id LIMIT ?", [*params, limit])
        return [_delivery(r) for r in rows]

    async def binding(self, tool_use_id: str) -> dict[str, Any] | None:
        """What the PreToolUse hook reported for this tool call, if it did."""
        rows = await self._all("SELECT body FROM bindings WHERE tool_use_id = ?", (tool_use_id,))
        return dict(json.loads(rows[0]["body"])) if rows else None

    async def delivery(self, did: str) -> dict[str, Any] | None:
        rows = await self._all("SELECT * FROM deliveries WHERE id = ?", (did,))
        return _delivery(rows[0]) if rows else None


# A group's counts and its children's sites, read from the index tasks_group_state alone
# (schema 7) for the tasks' side: its expression is written here exactly as in the index.
GROUP_COUNTS = (
    "SELECT state, count(*) AS n, min(id) AS first, max(id) AS last FROM tasks "
    "WHERE group_id = ? GROUP BY state"
)
# Schema 10 keeps each task's current attempt's site in its row: one index, no attempt read.
GROUP_SITES = (
    "SELECT current_site AS site, count(*) AS n FROM tasks "
    "WHERE group_id = ? AND current_site IS NOT NULL GROUP BY current_site"
)
# Both in one statement: one trip to the reader's thread, not two (each trip waits for a CPU
# and the GIL when the machine is busy, as it is during the sweeps this view is watched in).
GROUP_SUMMARY = (
    "SELECT 'state' AS kind, state AS key, n, first, last FROM ("  # noqa: S608 (fixed text)
    f"{GROUP_COUNTS}) AS c UNION ALL SELECT 'site', site, n, NULL, NULL FROM ({GROUP_SITES}) AS s"
)


# `group_children`'s fields of a task's and of an attempt's body, in the order it reads them.
_TASK_FIELDS = (
    "'$.request.name', '$.decision', '$.reasons', '$.accepted_attempt', '$.spread_relaxed'"
)
_ATTEMPT_FIELDS = "'$.superseded', '$.pending_since', '$.account', '$.shape'"


def children_query(
    group_id: str,
    *,
    after: str | None,
    limit: int | None,
    acting: Sequence[str],
    pg: bool = False,
) -> tuple[str, list[object]]:
    """`GroupReads.group_children`'s statement and parameters: the page of the group's tasks
    (schema 9's index walks their ids in order), each joined with its attempts (in
    PostgreSQL's words with `pg`)."""
    page = "SELECT * FROM tasks WHERE group_id = ?"
    params: list[object] = [group_id]
    if acting:
        marks = ",".join("?" * len(acting))
        page += (
            f" AND (state NOT IN ({marks}) OR EXISTS (SELECT 1 FROM attempts p"  # noqa: S608
            " WHERE p.task_id = tasks.id AND p.state = 'pending'))"
        )
        params = [*params, *acting]
    if after is not None:
        page, params = page + " AND id > ?", [*params, after]
    if limit is not None:
        page, params = page + " ORDER BY id LIMIT ?", [*params, limit]
    # Several paths in one json_extract: each body is parsed once per row, not once per
    # field, and the fields come as one JSON array (one decode per row in Python).
    task, attempt, joins = (
        sql_pg.children_fields()
        if pg
        else (
            f"json_extract(t.body, {_TASK_FIELDS})",
            f"json_extract(a.body, {_ATTEMPT_FIELDS})",
            "FROM ({page}) t LEFT JOIN attempts a ON a.task_id = t.id",
        )
    )
    sql = (
        "SELECT t.id, t.state, t.idempotency_key AS key, "
        f"{task} AS task, "
        "a.n, a.site, a.partition, a.job_id, a.state AS attempt_state, "
        f"{attempt} AS attempt " + joins.format(page=page) + " ORDER BY t.id, a.n"
    )
    return sql, params


def _child_index(task_id: str, key: str) -> int:
    """A child's position: `t<group>-<i>`, or (groups from before 0.3) its key's suffix."""
    tail = task_id.rsplit("-", 1)[-1] if "-" in task_id else key.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _group(r: Row) -> dict[str, Any]:
    return {
        "id": r["id"],
        "state": r["state"],
        "round": r["round"],
        "created_at": r["created_at"],
        "body": json.loads(r["body"]),
        "owner": r["owner"],
    }


def _delivery(r: Row) -> dict[str, Any]:
    return {
        "id": r["id"],
        "event_id": r["event_id"],
        "continuation_id": r["continuation_id"],
        "state": r["state"],
        "attempts": r["attempts"],
        "next_at": r["next_at"],
        "updated_at": r["updated_at"],
        "body": json.loads(r["body"]),
    }


# Each probe of a site reduced to what a picture needs, in SQL: when, health, and per partition
# pending/running jobs and free/total GPUs (PartitionState's fields; a missing one reads as its
# default, 0). json_each walks the partitions in their stored order.
HISTORY_POINTS = """
SELECT s.collected_at, s.health, (
    SELECT json_group_array(json_object(
        'name', json_extract(p.value, '$.name'),
        'pending_jobs', coalesce(json_extract(p.value, '$.pending_jobs'), 0),
        'running_jobs', coalesce(json_extract(p.value, '$.running_jobs'), 0),
        'free_gpus', coalesce(json_extract(p.value, '$.free_gpus'), 0),
        'total_gpus', coalesce(json_extract(p.value, '$.total_gpus'), 0)))
    FROM json_each(s.state, '$.partitions') AS p) AS partitions
FROM snapshots AS s WHERE s.site = ?
"""


class HistoryReads(Reads):
    """A site's recent probes as a picture's points."""

    async def site_points(
        self, site: str, *, limit: int = 100, before: datetime | None = None
    ) -> list[dict[str, Any]]:
        """The newest `limit` probes of `site` (older than `before`, if given), oldest first,
        each {at, health, partitions: [{name, pending_jobs, running_jobs, free_gpus,
        total_gpus}]}. No `SiteState` is built: a dashboard asks for 120 probes of every site
        every few seconds, and validating whole snapshots grew the daemon's heap by megabytes."""
        sql, params = self._pick(HISTORY_POINTS, sql_pg.HISTORY_POINTS), [site]
        if before is not None:
            sql, params = sql + " AND s.collected_at < ?", [site, iso(before)]
        rows = await self._all(sql + " ORDER BY s.seq DESC LIMIT ?", (*params, limit))
        return [
            {
                "at": datetime.fromisoformat(str(r[0])).isoformat(),
                "health": str(r[1]),
                "partitions": json.loads(str(r[2])),
            }
            for r in reversed(rows)
        ]
