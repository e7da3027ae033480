"""Archiving delivered events keeps the store bounded: only old, routed, fully delivered
events move, to a JSON-lines file first; the log stays append-only for every other writer."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from fedhpc.store import Store
from fedhpc.store.archive import archive_events

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
OLD = NOW - timedelta(days=40)


async def _log(store: Store) -> list[str]:
    """Six old events, two recent ones; the bridge routed the first seven; the fourth old one
    still has a pending delivery, the fifth a delivered one. Returns the event ids."""
    ids = []
    async with store.transaction() as tx:
        for i in range(8):
            at = OLD + timedelta(minutes=i) if i < 6 else NOW - timedelta(hours=1)
            ev = await tx.append_event(
                "task.terminal", f"t{i}", {"task_id": f"t{i}"}, at=at, key=f"k{i}"
            )
            assert ev is not None
            ids.append(ev.id)
        await tx.set_cursor("bridge", 7, at=NOW)
        await tx.mark_consumed("bridge", ids[:7], at=NOW)
        for i, state in ((3, "pending"), (4, "delivered")):
            await tx.put_delivery(
                f"d{i}",
                event_id=ids[i],
                continuation_id="c",
                state=state,
                attempts=1,
                next_at=NOW,
                body={},
                at=NOW,
            )
    return ids


async def test_old_delivered_events_move_to_the_archive_and_nothing_else(
    store: Store, tmp_path: Path
) -> None:
    ids = await _log(store)
    folder = tmp_path / "archive"
    dry = await archive_events(
        store, folder, before=NOW - timedelta(days=30), now=NOW, dry_run=True
    )
    assert (dry.archived, dry.remaining, dry.archive) == (5, 8, None)
    assert not folder.exists()
    report = await archive_events(store, folder, before=NOW - timedelta(days=30), now=NOW)
    assert (report.archived, report.remaining) == (5, 3)
    assert report.archive is not None
    lines = [json.loads(x) for x in Path(report.archive).read_text().splitlines()]
    assert [x["id"] for x in lines] == [ids[i] for i in (0, 1, 2, 4, 5)]
    assert lines[0]["payload"] == {"task_id": "t0"} and lines[0]["kind"] == "task.terminal"
    left = [e.id for e in await store.events_after(0, limit=100)]
    # Kept: a delivery still pending (3), recent events (6, 7; 7 not yet routed either).
    assert left == [ids[3], ids[6], ids[7]]
    assert [d["id"] for d in await store.deliveries()] == ["d3"]  # d4 went with its event
    again = await archive_events(store, folder, before=NOW - timedelta(days=30), now=NOW)
    assert again.archived == 0
    assert len(Path(report.archive).read_text().splitlines()) == 5  # nothing written twice


async def test_the_log_stays_append_only_for_every_other_writer(store: Store) -> None:
    await _log(store)
    conn = sqlite3.connect(store.path)
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("DELETE FROM events")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("UPDATE events SET kind = 'x'")
    conn.close()


async def test_a_cursor_that_never_moved_archives_nothing(store: Store, tmp_path: Path) -> None:
    async with store.transaction() as tx:
        await tx.append_event("site.offline", "s", {}, at=OLD, key="s")
    report = await archive_events(store, tmp_path / "a", before=NOW, now=NOW)
    assert (report.archived, report.remaining) == (0, 1)


async def test_each_sites_newest_offline_and_online_events_stay(
    store: Store, tmp_path: Path
) -> None:
    """The daemon reads how long a site has been offline from its newest site.offline event
    (task.site_lost): archiving it would stop those wake-ups for good."""
    ids = []
    async with store.transaction() as tx:
        for i, (kind, site) in enumerate(
            [
                ("site.offline", "a"),
                ("site.online", "a"),
                ("site.offline", "a"),
                ("site.offline", "b"),
                ("task.terminal", "t"),
            ]
        ):
            ev = await tx.append_event(kind, site, {}, at=OLD + timedelta(minutes=i), key=f"k{i}")
            assert ev is not None
            ids.append(ev.id)
        await tx.set_cursor("bridge", 5, at=OLD)
    report = await archive_events(store, tmp_path / "a", before=NOW, now=NOW)
    assert report.archived == 2 and report.archive is not None
    lines = Path(report.archive).read_text().splitlines()
    assert [json.loads(x)["id"] for x in lines] == [ids[0], ids[4]]
    left = [e.id for e in await store.events_after(0, limit=100)]
    assert left == [ids[1], ids[2], ids[3]]
    last = await store.last_event("site.offline", "a")
    assert last is not None and last.id == ids[2]


async def test_a_pull_client_that_acknowledged_lately_holds_its_events(
    store: Store, tmp_path: Path
) -> None:
    """A list_events/ack_events client behind the bridge keeps what it has not acknowledged,
    while it is active (acknowledged since the cutoff); a silent one stops holding."""
    ids = await _log(store)
    async with store.transaction() as tx:
        await tx.set_cursor("my-client", 2, at=NOW - timedelta(days=1))  # active, behind
        await tx.set_cursor("gone-client", 0, at=NOW - timedelta(days=60))  # silent
    before = NOW - timedelta(days=30)
    report = await archive_events(store, tmp_path / "a", before=before, now=NOW)
    assert report.archived == 2
    left = [e.id for e in await store.events_after(0, limit=100)]
    assert left == ids[2:]
    async with store.transaction() as tx:
        await tx.set_cursor("my-client", 7, at=NOW)
    report = await archive_events(store, tmp_path / "a", before=before, now=NOW)
    assert report.archived == 3  # 2, 4, 5; 3 still has a pending delivery


async def test_the_last_seq_survives_archiving_the_newest_events(
    store: Store, tmp_path: Path
) -> None:
    """A quiet daemon archives even its newest events; last_seq (list_events' check of `after`,
    the health answer) still names the newest seq ever given, not max(seq) of what is left."""
    async with store.transaction() as tx:
        for i in range(3):
            await tx.append_event("task.terminal", f"t{i}", {}, at=OLD, key=f"k{i}")
        await tx.set_cursor("bridge", 3, at=NOW)
    report = await archive_events(store, tmp_path / "a", before=NOW, now=NOW)
    assert (report.archived, report.remaining) == (3, 0)
    assert await store.events_after(0) == []
    assert await store.last_seq() == 3
    assert (await store.schema_and_last_seq())[1] == 3
    async with store.transaction() as tx:
        ev = await tx.append_event("task.terminal", "t9", {}, at=NOW, key="k9")
    assert ev is not None and ev.seq == 4 == await store.last_seq()
