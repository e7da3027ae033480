"""Keeping the event log bounded: events that are old and fully handled move from the store to
a JSON-lines archive file, in one transaction per batch (written to the file first, so a crash
between the two leaves an event in both places, never in neither).

An event is archived when it is older than the cutoff, the resume bridge has routed it (its
cursor is past it), every pull client that acknowledged since the cutoff is past it, none of
its deliveries is still pending or running, and it is not a site's newest site.offline or
site.online event. Its delivery rows
and consumed-id marks go with it. `list_events` readers whose cursor is behind an archived
event continue after it: the archive file has it."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import anyio

from fedhpc.store import sql_pg
from fedhpc.store.db import Store
from fedhpc.store.tx import iso

__all__ = ["ArchiveReport", "archive_events"]

BRIDGE = "bridge"  # the resume bridge's consumer name (bridge/service.py)
BATCH = 2000  # events per transaction: the daemon keeps serving between batches


@dataclass(frozen=True, slots=True)
class ArchiveReport:
    """What one run moved (or, with dry_run, would move)."""

    archived: int
    remaining: int
    archive: str | None
    before: str

    def as_dict(self) -> dict[str, object]:
        return {
            "archived": self.archived,
            "remaining": self.remaining,
            "archive": self.archive,
            "before": self.before,
        }


# Kept whatever their age: each site's newest site.offline / site.online event (the daemon
# reads how long a site has been offline from them: store.last_event), and anything a
# consumer still holds: past the bridge's cursor, or past the cursor of any pull client
# (list_events/ack_events) that acknowledged since the cutoff. A client silent for longer
# than the keep window no longer holds events back.
_ELIGIBLE = """
    SELECT e.seq, e.id, e.kind, e.subject, e.created_at, e.payload FROM events e
    WHERE e.created_at < ?1 AND e.seq <= min(
        coalesce((SELECT cursor FROM consumers WHERE name = ?2), 0),
        coalesce((SELECT min(cursor) FROM consumers WHERE updated_at >= ?1), e.seq))
      AND NOT EXISTS (SELECT 1 FROM deliveries d
                      WHERE d.event_id = e.id AND d.state IN ('pending', 'started'))
      AND NOT (e.kind IN ('site.offline', 'site.online') AND e.seq = (
          SELECT max(x.seq) FROM events x WHERE x.kind = e.kind AND x.subject = e.subject))
      AND e.seq > ?3
    ORDER BY e.seq LIMIT ?4
"""


async def archive_events(
    store: Store, folder: Path, *, before: datetime, now: datetime, dry_run: bool = False
) -> ArchiveReport:
    """Move every eligible event created before `before` to `folder`/events-<now>.jsonl."""
    cutoff = iso(before)
    path = folder / f"events-{now.strftime('%Y%m%dT%H%M%SZ')}.jsonl"
    moved = 0
    after = 0
    while True:
        async with store.transaction() as tx:
            if tx.dialect == "postgresql":
                args: tuple[object, ...] = (cutoff, BRIDGE, cutoff, after, BATCH)
                rows = await tx.fetch(sql_pg.ARCHIVE_ELIGIBLE, args)
            else:
                rows = await tx.fetch(_ELIGIBLE, (cutoff, BRIDGE, after, BATCH))
            if not rows:
                break
            after = int(rows[-1]["seq"])
            if dry_run:
                moved += len(rows)
                continue
            lines = "".join(
                json.dumps(
                    {
                        "seq": r["seq"],
                        "id": r["id"],
                        "kind": r["kind"],
                        "subject": r["subject"],
                        "created_at": r["created_at"],
                        "payload": json.loads(r["payload"]),
                    },
                    separators=(",", ":"),
                )
                + "\n"
                for r in rows
            )
            await anyio.to_thread.run_sync(_append, path, lines)
            ids = [str(r["id"]) for r in rows]
            marks = ",".join("?" * len(ids))
            await tx.execute("INSERT INTO archiving (started_at) VALUES (?)", (iso(now),))
            await tx.execute(f"DELETE FROM consumed WHERE event_id IN ({marks})", ids)  # noqa: S608
            await tx.execute(f"DELETE FROM deliveries WHERE event_id IN ({marks})", ids)  # noqa: S608
            await tx.execute(f"DELETE FROM events WHERE id IN ({marks})", ids)  # noqa: S608
            await tx.execute("DELETE FROM archiving")
            moved += len(rows)
    async with store.transaction() as tx:
        left = await tx.fetch("SELECT count(*) AS n FROM events", ())
    return ArchiveReport(
        archived=moved,
        remaining=int(left[0]["n"]),
        archive=str(path) if moved and not dry_run else None,
        before=cutoff,
    )


def _append(path: Path, lines: str) -> None:
    """Append and fsync: the lines are on disk before their rows leave the store."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with path.open("a", encoding="utf-8") as f:
        f.write(lines)
        f.flush()
        os.fsync(f.fileno())
