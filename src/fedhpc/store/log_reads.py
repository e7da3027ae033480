"""The store's reads of the event log, consumers' cursors and sites' snapshots: a mixin of
`Store` (store/db.py), on either engine."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from fedhpc.domain.site import SiteState
from fedhpc.store import sql_pg
from fedhpc.store.events import Event
from fedhpc.store.reads import Reads
from fedhpc.store.tx import iso

__all__ = ["LogReads"]

# The newest event seq ever given, and the schema version: events.seq is AUTOINCREMENT, so
# sqlite_sequence keeps the seq after archiving moved the newest rows out (max(seq) would then
# go back, even to 0).
_LAST_SEQ = (
    "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0), "
    "(SELECT coalesce(max(seq), 0) FROM events)) AS seq, "
    "(SELECT user_version FROM pragma_user_version) AS schema"
)


class LogReads(Reads):
    """Events after a cursor, the newest seq, cursors, consumed ids, snapshots."""

    # -- events ---------------------------------------------------------------------------
    async def events_after(
        self, cursor: int, *, limit: int = 100, kinds: Sequence[str] = (), owner: str | None = None
    ) -> list[Event]:
        """Events past `cursor` in seq order; only those about `owner`'s tasks, groups and
        transfers when given (service mode: no site event, nothing of another person's)."""
        sql = "SELECT * FROM events WHERE seq > ?"
        params: list[Any] = [cursor]
        if kinds:
            sql += f" AND kind IN ({','.join('?' * len(kinds))})"
            params.extend(kinds)
        if owner is not None:
            sql += (
                " AND subject IN (SELECT id FROM tasks WHERE owner = ?"
                " UNION ALL SELECT id FROM groups WHERE owner = ?"
                " UNION ALL SELECT id FROM transfers WHERE owner = ?)"
            )
            params.extend((owner, owner, owner))
        rows = await self._all(sql + " ORDER BY seq LIMIT ?", [*params, limit])
        return [Event.from_row(r) for r in rows]

    async def last_event(self, kind: str, subject: str) -> Event | None:
        """The newest event of `kind` about `subject` (e.g. when a site last went offline)."""
        rows = await self._all(
            "SELECT * FROM events WHERE kind = ? AND subject = ? ORDER BY seq DESC LIMIT 1",
            (kind, subject),
        )
        return Event.from_row(rows[0]) if rows else None

    async def last_seq(self) -> int:
        """The newest seq ever given to an event, kept or archived (store/archive.py may move
        the newest rows out; a reader's cursor at an archived seq is still a real one)."""
        rows = await self._all(self._pick(_LAST_SEQ, sql_pg.LAST_SEQ))
        return int(rows[0]["seq"])

    async def schema_and_last_seq(self) -> tuple[int, int]:
        """The file's schema version and the newest event's seq, in one read (GET /v1/health)."""
        rows = await self._all(self._pick(_LAST_SEQ, sql_pg.LAST_SEQ))
        return int(rows[0]["schema"]), int(rows[0]["seq"])

    async def cursor(self, consumer: str) -> int:
        rows = await self._all("SELECT cursor FROM consumers WHERE name = ?", (consumer,))
        return int(rows[0]["cursor"]) if rows else 0

    async def consumed(self, consumer: str, event_ids: Sequence[str]) -> set[str]:
        if not event_ids:
            return set()
        marks = ",".join("?" * len(event_ids))
        rows = await self._all(
            f"SELECT event_id FROM consumed WHERE consumer = ? AND event_id IN ({marks})",  # noqa: S608 (placeholders only)
            (consumer, *event_ids),
        )
        return {str(r["event_id"]) for r in rows}

    # -- snapshots ------------------------------------------------------------------------
    async def latest_site_states(self) -> dict[str, SiteState]:
        rows = await self._all(
            "SELECT state FROM snapshots "
            "WHERE seq IN (SELECT max(seq) FROM snapshots GROUP BY site)"
        )
        states = [SiteState.model_validate_json(r["state"]) for r in rows]
        return {s.site: s for s in states}

    async def site_history(
        self, site: str, *, limit: int = 100, before: datetime | None = None
    ) -> list[SiteState]:
        """The newest `limit` snapshots of `site` (older than `before`, if given), oldest first."""
        sql, params = "SELECT state FROM snapshots WHERE site = ?", [site]
        if before is not None:
            sql, params = sql + " AND collected_at < ?", [site, iso(before)]
        rows = await self._all(sql + " ORDER BY seq DESC LIMIT ?", (*params, limit))
        return [SiteState.model_validate_json(r["state"]) for r in reversed(rows)]

    async def event(self, event_id: str) -> Event | None:
        rows = await self._all("SELECT * FROM events WHERE id = ?", (event_id,))
        return Event.from_row(rows[0]) if rows else None
