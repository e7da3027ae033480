"""One write transaction of the store: effects and their bookkeeping commit together."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from fedhpc.domain.site import SiteState
from fedhpc.store import listen, sql_pg
from fedhpc.store.engine import Conn, Row
from fedhpc.store.events import Event, event_id

__all__ = ["Tx", "iso"]


# A group child whose request replan never changed and no scheduler refused
# (`holdback.as_submitted`): its siblings as submitted ask the same, so one held child
# speaks for them all.
AS_SUBMITTED = (
    "coalesce(json_extract(body, '$.reopened'), 0) = 0 "
    "AND coalesce(json_array_length(body, '$.excluded_sites'), 0) = 0 "
    "AND coalesce(json_array_length(body, '$.refused_sites'), 0) = 0"
)


SET_QUEUED_DECISION = (
    "UPDATE tasks SET body = json_set(body, '$.decision', ?), updated_at = ? "  # noqa: S608
    f"WHERE group_id = ? AND state = 'queued' AND {AS_SUBMITTED} "
    "AND coalesce(json_extract(body, '$.decision'), '') != ?"
)


# The owner of a continuation's subject: a task, a group or a transfer (service mode).
_SUBJECT_OWNER = (
    "coalesce((SELECT owner FROM tasks WHERE id = ?), (SELECT owner FROM groups WHERE id = ?), "
    "(SELECT owner FROM transfers WHERE id = ?))"
)


def iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat()


class Tx:
    """One write transaction. Effects and their bookkeeping commit together or not at all."""

    def __init__(self, conn: Conn) -> None:
        self._c = conn
        self.dialect = conn.dialect
        self.conn: Any = getattr(conn, "raw", conn)  # the driver's own connection
        self._told = False  # PostgreSQL: the other daemons are told of this commit's events

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        return await self._c.run(sql, params)

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """Rows read inside this transaction (they see its own writes)."""
        return await self._c.rows(sql, params)

    def pick(self, sqlite: str, postgresql: str) -> str:
        """The statement in this transaction's engine's words."""
        return postgresql if self.dialect == "postgresql" else sqlite

    async def append_event(
        self,
        kind: str,
        subject: str,
        payload: dict[str, Any],
        *,
        at: datetime,
        key: str | None = None,
    ) -> Event | None:
        """Append one event. With a `key`, the id is derived from it, so appending the same
        fact twice returns None instead of writing a duplicate."""
        eid = event_id(key)
        values = (eid, kind, subject, iso(at), json.dumps(payload, sort_keys=True))
        if self.dialect == "postgresql":
            rows = await self._c.rows(sql_pg.APPEND_EVENT, (*values, eid))
            if rows and not self._told:  # one NOTIFY per transaction, sent at its commit
                await self._c.rows(sql_pg.NOTIFY_EVENTS, (listen.ORIGIN,))
                self._told = True
        else:
            rows = await self._c.rows(
                "INSERT INTO events (id, kind, subject, created_at, payload) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING seq",
                values,
            )
        if not rows:
            return None
        seq = int(rows[0][0])
        return Event(seq=seq, id=eid, kind=kind, subject=subject, created_at=at, payload=payload)

    async def set_cursor(self, consumer: str, seq: int, *, at: datetime) -> None:
        await self._c.run(
            "INSERT INTO consumers (name, cursor, updated_at) VALUES (?, ?, ?) "
            "ON CONFLICT (name) DO UPDATE SET cursor = CASE WHEN excluded.cursor > "
            "consumers.cursor THEN excluded.cursor ELSE consumers.cursor END, "
            "updated_at = excluded.updated_at",
            (consumer, seq, iso(at)),
        )

    async def mark_consumed(self, consumer: str, event_ids: Iterable[str], *, at: datetime) -> None:
        await self._c.run(
            "INSERT INTO consumers (name, cursor, updated_at) VALUES (?, 0, ?) "
            "ON CONFLICT DO NOTHING",
            (consumer, iso(at)),
        )
        await self._c.run_many(
            "INSERT INTO consumed (consumer, event_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
            [(consumer, e) for e in event_ids],
        )

    async def put_task(
        self,
        task_id: str,
        *,
        state: str,
        body: dict[str, Any],
        at: datetime,
        idempotency_key: str | None = None,
        group_id: str | None = None,
        dedupe: str | None = None,
        owner: str | None = None,
    ) -> bool:
        """Insert a task, or update its state and body; False if the key belongs to another.
        `owner` is written with the new row only (an update never moves a task to another)."""
        if self.dialect == "postgresql":
            body_text, stamp = json.dumps(body), iso(at)
            insert = (
                task_id, idempotency_key, group_id, stamp, stamp, state, body_text, dedupe, owner
            )  # fmt: skip
            if await self._c.run(sql_pg.PUT_TASK_INSERT, insert):
                return True
            update = (state, body_text, stamp, dedupe, task_id)
            return await self._c.run(sql_pg.PUT_TASK_UPDATE, update) > 0
        n = await self._c.run(
            "INSERT INTO tasks (id, idempotency_key, group_id, created_at, updated_at, state, body,"
            " dedupe, owner) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
            "state = excluded.state, body = excluded.body, updated_at = excluded.updated_at, "
            "dedupe = coalesce(excluded.dedupe, tasks.dedupe) ON CONFLICT DO NOTHING",
            (
                task_id,
                idempotency_key,
                group_id,
                iso(at),
                iso(at),
                state,
                json.dumps(body),
                dedupe,
                owner,
            ),
        )
        return n > 0

    async def set_queued_decision(self, group_id: str, decision: str, *, at: datetime) -> int:
        """Every still-queued child of a group as submitted (`AS_SUBMITTED`: not one replan
        changed) gets `decision` (one statement, only rows whose decision differs): a held
        group's children are not loaded one by one."""
        return await self._c.run(
            self.pick(SET_QUEUED_DECISION, sql_pg.SET_QUEUED_DECISION),
            (decision, iso(at), group_id, decision),
        )

    async def insert_tasks(
        self,
        rows: Iterable[tuple[str, str, str | None, str, dict[str, Any]]],
        *,
        at: datetime,
        owner: str | None = None,
    ) -> None:
        """Insert new tasks (id, idempotency key, group id, state, body) in one statement: a
        group's children, written as they are produced rather than all held at once; each
        `owner`'s (the group's)."""
        stamp = iso(at)
        await self._c.run_many(
            "INSERT INTO tasks (id, idempotency_key, group_id, created_at, updated_at, state, body,"
            " owner) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                (tid, key, gid, stamp, stamp, state, json.dumps(body), owner)
                for tid, key, gid, state, body in rows
            ),
        )

    async def put_attempt(
        self,
        task_id: str,
        n: int,
        *,
        site: str,
        partition: str,
        job_name: str,
        job_id: str | None,
        state: str,
        body: dict[str, Any],
        at: datetime,
    ) -> None:
        """Insert or update one attempt (the intent is written before the job is submitted)."""
        await self._c.run(
            "INSERT INTO attempts (task_id, n, site, partition, job_name, job_id, state, "
            "created_at, updated_at, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (task_id, n) DO UPDATE SET job_id = excluded.job_id, "
            "state = excluded.state, updated_at = excluded.updated_at, body = excluded.body",
            (
                task_id,
                n,
                site,
                partition,
                job_name,
                job_id,
                state,
                iso(at),
                iso(at),
                json.dumps(body),
            ),
        )

    async def put_group(
        self,
        group_id: str,
        *,
        state: str,
        round_: int,
        body: dict[str, Any],
        at: datetime,
        dedupe: str | None = None,
        owner: str | None = None,
    ) -> None:
        """Insert or update a group; `owner` is written with the new row only."""
        await self._c.run(
            "INSERT INTO groups (id, created_at, state, round, body, dedupe, owner) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET state = excluded.state, round = excluded.round, "
            "body = excluded.body",
            (group_id, iso(at), state, round_, json.dumps(body), dedupe, owner),
        )

    async def put_continuation(
        self, cid: str, *, subject: str, runtime: str, body: dict[str, Any], at: datetime
    ) -> None:
        """The continuation is its subject's owner's (the task, group or transfer it wakes
        for, written earlier in this transaction)."""
        await self._c.run(
            "INSERT INTO continuations (id, subject, runtime, created_at, body, owner) "  # noqa: S608 (fixed text)
            f"VALUES (?, ?, ?, ?, ?, {_SUBJECT_OWNER}) ON CONFLICT DO NOTHING",
            (cid, subject, runtime, iso(at), json.dumps(body), subject, subject, subject),
        )

    async def put_delivery(
        self,
        did: str,
        *,
        event_id: str,
        continuation_id: str,
        state: str,
        attempts: int,
        next_at: datetime,
        body: dict[str, Any],
        at: datetime,
    ) -> None:
        await self._c.run(
            "INSERT INTO deliveries (id, event_id, continuation_id, state, attempts, next_at, "
            "updated_at, body, owner) VALUES (?, ?, ?, ?, ?, ?, ?, ?, "
            "(SELECT owner FROM continuations WHERE id = ?)) ON CONFLICT (id) DO UPDATE SET "
            "state = excluded.state, attempts = excluded.attempts, next_at = excluded.next_at, "
            "updated_at = excluded.updated_at, body = excluded.body",
            (
                did,
                event_id,
                continuation_id,
                state,
                attempts,
                iso(next_at),
                iso(at),
                json.dumps(body),
                continuation_id,  # a delivery is its continuation's owner's
            ),
        )

    async def put_binding(
        self,
        *,
        tool_use_id: str,
        session_id: str,
        body: dict[str, Any],
        at: datetime,
        keep_after: datetime,
    ) -> None:
        """Record which session made a tool call; forget bindings older than `keep_after`
        (a submit reads its binding within seconds of the hook)."""
        await self._c.run("DELETE FROM bindings WHERE reported_at < ?", (iso(keep_after),))
        await self._c.run(
            "INSERT INTO bindings (tool_use_id, session_id, reported_at, body) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (tool_use_id) DO UPDATE SET session_id = excluded.session_id, "
            "reported_at = excluded.reported_at, body = excluded.body",
            (tool_use_id, session_id, iso(at), json.dumps(body)),
        )

    async def save_site_states(self, states: Iterable[SiteState], *, keep: int) -> None:
        """Record one refresh; keep at most `keep` snapshots per site (bounded history)."""
        for st in states:
            await self._c.run(
                "INSERT INTO snapshots (site, collected_at, health, state) VALUES (?, ?, ?, ?)",
                (st.site, iso(st.collected_at), st.health.value, st.model_dump_json()),
            )
            await self._c.run(
                "DELETE FROM snapshots WHERE site = ? AND seq NOT IN "
                "(SELECT seq FROM snapshots WHERE site = ? ORDER BY seq DESC LIMIT ?)",
                (st.site, st.site, keep),
            )
