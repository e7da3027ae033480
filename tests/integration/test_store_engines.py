"""The store's contract on both engines: every engine-neutral test of the store's unit tests
(reads, writes, the event log's order and cursors, archiving), run again here on SQLite and on
a real PostgreSQL server (`pg_server`), and the reads and rules those tests leave out."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from fedhpc.store import Store
from fedhpc.store.schema import SCHEMA_VERSION
from fedhpc_dev.postgres import PgServer
from tests.unit.test_archive import (  # noqa: F401 (collected here, on both engines)
    test_a_cursor_that_never_moved_archives_nothing,
    test_a_pull_client_that_acknowledged_lately_holds_its_events,
    test_each_sites_newest_offline_and_online_events_stay,
    test_old_delivered_events_move_to_the_archive_and_nothing_else,
    test_the_last_seq_survives_archiving_the_newest_events,
)
from tests.unit.test_events_consumers import (  # noqa: F401
    test_a_task_reopened_by_replan_reports_its_new_outcome_as_a_new_event,
    test_last_seq_and_last_event_read_the_log,
)
from tests.unit.test_store import (  # noqa: F401
    test_a_group_summary_is_one_read_with_counts_per_state_and_per_site,
    test_a_sites_points_are_its_probes_reduced_in_sql,
    test_a_wait_sample_whose_body_lacks_the_shape_has_the_shapes_defaults,
    test_cursor_and_consumed_ids_commit_only_with_the_effect,
    test_events_with_the_same_key_are_written_once,
    test_health_reads_the_schema_and_the_last_event_in_one_read,
    test_idempotency_key_belongs_to_one_task,
    test_snapshot_history_is_bounded_per_site,
    test_the_wait_history_is_decoded_off_the_event_loops_thread,
)

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(engine: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a fresh store is: a file (SQLite) or a new database on the private server."""
    if engine == "sqlite":
        return str(tmp_path / "state" / "fedhpc.db")
    server: PgServer = request.getfixturevalue("pg_server")
    return server.create_database()


async def _open(url: str) -> Store:
    return await (Store.open_url(url) if url.startswith("postgresql") else Store.open(Path(url)))


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    s = await _open(store_url)
    yield s
    await s.close()


async def _rows(store: Store, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    return [tuple(r[i] for i in range(len(r.keys()))) for r in await store._all(sql, params)]  # type: ignore[attr-defined]


async def test_the_event_log_refuses_updates_and_deletes_on_either_engine(store: Store) -> None:
    async with store.transaction() as tx:
        await tx.append_event("x", "s", {}, at=T0)
    for sql in ("UPDATE events SET kind = 'y'", "DELETE FROM events"):
        with pytest.raises(Exception, match="append-only"):
            async with store.transaction() as tx:
                await tx.execute(sql)
    assert await store.count("events") == 1


async def test_reopening_keeps_the_data_and_a_newer_schema_is_refused(store_url: str) -> None:
    s = await _open(store_url)
    async with s.transaction() as tx:
        await tx.append_event("x", "t1", {}, at=T0)
    await s.close()
    s = await _open(store_url)
    assert (await s.count("events"), await s.schema_version()) == (1, SCHEMA_VERSION)
    async with s.transaction() as tx:  # a newer fedhpc's mark
        if tx.dialect == "postgresql":
            await tx.execute("UPDATE fedhpc_schema SET version = ?", (SCHEMA_VERSION + 1,))
        else:
            await tx.conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    await s.close()
    with pytest.raises(RuntimeError, match="newer than this fedhpc"):
        await _open(store_url)


async def test_a_tasks_current_site_follows_its_attempts_and_the_accepted_one(
    store: Store,
) -> None:
    async def attempt(n: int, site: str, body: dict[str, object]) -> None:
        async with store.transaction() as tx:
            await tx.put_attempt(
                "t1", n, site=site, partition="p", job_name=f"j{n}", job_id=str(n),
                state="submitted", body=body, at=T0,
            )  # fmt: skip

    async def site() -> object:
        return (await _rows(store, "SELECT current_site FROM tasks WHERE id = 't1'"))[0][0]

    async with store.transaction() as tx:
        await tx.put_task("t1", state="queued", body={}, at=T0)
    assert await site() is None
    await attempt(1, "s1", {})
    await attempt(2, "s2", {})
    assert await site() == "s2"
    await attempt(2, "s2", {"superseded": True})
    assert await site() == "s1"
    async with store.transaction() as tx:
        await tx.put_task("t1", state="completed", body={"accepted_attempt": 2}, at=T0)
    assert await site() == "s2"


async def _group_of_children(store: Store) -> None:
    """Group g1: children t1-0..t1-11 (ids that sort differently by locale: `-` and digits),
    queued but for t1-0 (completed on s1, its first attempt superseded by one on s2)."""
    async with store.transaction() as tx:
        await tx.put_group("g1", state="running", round_=1, body={}, at=T0)
        for i in range(12):
            body = {"request": {"name": f"c{i}"}, "decision": "wait" if i == 5 else ""}
            await tx.put_task(
                f"t1-{i}", state="completed" if i == 0 else "queued", body=body,
                at=T0 + timedelta(seconds=i), group_id="g1", idempotency_key=f"g1:{i}",
            )  # fmt: skip
        for n, site, sup in ((1, "s1", True), (2, "s2", False)):
            await tx.put_attempt(
                "t1-0", n, site=site, partition="p", job_name=f"j{n}", job_id=str(n),
                state="completed", body={"superseded": sup, "account": "a"}, at=T0,
            )  # fmt: skip


async def test_a_groups_children_page_in_byte_order_with_their_current_attempts(
    store: Store,
) -> None:
    await _group_of_children(store)
    children = await store.group_children("g1")
    assert [c["id"] for c in children] == [f"t1-{i}" for i in range(12)]
    first = children[0]
    assert (first["attempts"], first["name"], first["attempt"]["site"]) == (2, "c0", "s2")
    assert first["attempt"]["account"] == "a" and children[5]["decision"] == "wait"
    page = await store.group_children("g1", after="t1-1", limit=3)
    # The page is the next ids in byte order (t1-10, t1-11, t1-2), given in child order.
    assert [c["id"] for c in page] == ["t1-2", "t1-10", "t1-11"]
    acting = await store.group_children("g1", acting=["completed"])
    assert [c["id"] for c in acting] == [f"t1-{i}" for i in range(1, 12)]
    assert sorted(await store.group_sites("g1")) == ["s1", "s2"]
    assert await store.recent_groups(5) == ["g1"]


async def test_listings_and_the_queue_read_the_same_on_either_engine(store: Store) -> None:
    await _group_of_children(store)
    listing = await store.task_listing(limit=3)
    assert [r["id"] for r in listing] == ["t1-11", "t1-10", "t1-9"]
    done = await store.task_listing(state="completed")
    assert [(r["id"], r["name"], r["attempt"]["site"], r["attempts"]) for r in done] == [
        ("t1-0", "c0", "s2", 2)
    ]
    queued = await store.queued_tasks(4)
    assert [t["id"] for t in queued] == ["t1-1", "t1-2", "t1-3", "t1-4"]
    after = (queued[-1]["created_at"], queued[-1]["id"])
    assert [t["id"] for t in await store.queued_tasks(2, after=after)] == ["t1-5", "t1-6"]
    assert await store.queued_tasks(4, skip_groups=["g1"]) == []
    assert [t["id"] for t in await store.list_tasks(state="completed")] == ["t1-0"]
    assert len(await store.list_tasks(group_id="g1", limit=100)) == 12


async def test_a_held_groups_decision_is_written_in_one_statement(store: Store) -> None:
    await _group_of_children(store)
    async with store.transaction() as tx:
        await tx.put_task(
            "t1-3", state="queued", body={"request": {"name": "c3"}, "reopened": 1},
            at=T0, group_id="g1",
        )  # fmt: skip
        changed = await tx.set_queued_decision("g1", "held", at=T0)
    assert changed == 10  # 11 queued, one reopened by replan
    t2, t3 = await store.get_task("t1-2"), await store.get_task("t1-3")
    assert t2 is not None and t3 is not None
    assert (t2["body"]["decision"], t2["body"]["request"], t3["body"].get("decision")) == (
        "held",
        {"name": "c2"},
        None,
    )
    async with store.transaction() as tx:
        assert await tx.set_queued_decision("g1", "held", at=T0) == 0


async def test_pending_budgets_and_attempt_states_read_fields_not_bodies(store: Store) -> None:
    async with store.transaction() as tx:
        body = {"request": {"adaptation": {"max": 2}}, "replacements_used": 1}
        await tx.put_task("t1", state="pending", body=body, at=T0)
        await tx.put_task("t2", state="pending", body={}, at=T0)
        for tid in ("t1", "t2"):
            await tx.put_attempt(
                tid, 1, site="s", partition="p", job_name="j", job_id="1", state="pending",
                body={}, at=T0,
            )  # fmt: skip
    assert await store.pending_budgets() == {
        "t1": {"adaptation": {"max": 2}, "used": 1},
        "t2": {"adaptation": None, "used": 0},
    }
    assert [a["task_id"] for a in await store.attempts_in(["pending"], site="s")] == ["t1", "t2"]
    assert await store.attempts_in(["pending"], site="other") == []


async def test_bridge_rows_continuations_deliveries_and_bindings(store: Store) -> None:
    async with store.transaction() as tx:
        for _ in range(2):
            await tx.put_continuation("c1", subject="t1", runtime="claude", body={"a": 1}, at=T0)
        await tx.put_delivery(
            "d1", event_id="e1", continuation_id="c1", state="pending", attempts=0,
            next_at=T0, body={}, at=T0,
        )  # fmt: skip
        await tx.put_delivery(
            "d1", event_id="e1", continuation_id="c1", state="delivered", attempts=1,
            next_at=T0, body={"ok": True}, at=T0,
        )  # fmt: skip
        for tool, at in (("old", T0 - timedelta(hours=2)), ("new", T0)):
            await tx.put_binding(
                tool_use_id=tool, session_id="s", body={"t": tool}, at=at,
                keep_after=T0 - timedelta(hours=1),
            )  # fmt: skip
    assert [c["id"] for c in await store.continuations_for(["t1", "t2"])] == ["c1"]
    delivery = await store.delivery("d1")
    assert delivery is not None and (delivery["state"], delivery["attempts"]) == ("delivered", 1)
    assert [d["id"] for d in await store.deliveries(states=["delivered"])] == ["d1"]
    assert await store.binding("new") == {"t": "new"}
    async with store.transaction() as tx:  # the next report forgets the old one
        await tx.put_binding(
            tool_use_id="x", session_id="s", body={}, at=T0, keep_after=T0 - timedelta(hours=1)
        )
    assert await store.binding("old") is None


async def test_events_after_a_cursor_come_in_seq_order_by_kind(store: Store) -> None:
    async with store.transaction() as tx:
        for i in range(6):
            await tx.append_event("a" if i % 2 else "b", f"s{i}", {"i": i}, at=T0)
    all_events = await store.events_after(0)
    assert [e.seq for e in all_events] == sorted(e.seq for e in all_events)
    assert [e.payload["i"] for e in await store.events_after(all_events[1].seq)] == [2, 3, 4, 5]
    assert [e.payload["i"] for e in await store.events_after(0, kinds=["a"], limit=2)] == [1, 3]
    assert await store.event(all_events[0].id) == all_events[0]


async def test_both_engines_have_the_same_tables_columns_and_indexes(
    tmp_path: Path, pg_server: PgServer
) -> None:
    """One schema version means one schema: each table's columns and each index's name match
    (PostgreSQL's groups keep SQLite's rowid as a column)."""
    lite = await Store.open(tmp_path / "fedhpc.db")
    pg = await Store.open_url(pg_server.create_database())
    try:
        lite_cols = await _rows(
            lite,
            "SELECT m.name, p.name FROM sqlite_master m, pragma_table_info(m.name) p "
            "WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite%'",
        )
        pg_cols = await _rows(
            pg,
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'public' AND table_name != 'fedhpc_schema'",
        )
        assert sorted(pg_cols) == sorted([*lite_cols, ("groups", "rowid")])
        lite_idx = await _rows(
            lite, "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
        )
        pg_idx = await _rows(
            pg,
            "SELECT indexname FROM pg_indexes WHERE schemaname = 'public' "
            "AND indexname NOT LIKE '%pkey' AND indexname NOT LIKE '%_key'",
        )
        assert sorted(pg_idx) == sorted(lite_idx)
    finally:
        await lite.close()
        await pg.close()


async def _history(store: Store) -> dict[str, Any]:
    """What people and the daemon read of a store: enough to tell two stores apart."""
    return {
        "children": await store.group_children("g1"),
        "listing": await store.task_listing(limit=100),
        "events": await store.events_after(0, limit=100),
        "cursor": await store.cursor("bridge"),
        "last_seq": await store.last_seq(),
        "groups": await store.recent_groups(10),
        "deliveries": await store.deliveries(),
        "points": await store.site_points("a"),
    }


@pytest.mark.parametrize("direction", ["sqlite->postgresql", "postgresql->sqlite"])
async def test_an_export_imports_into_the_other_engine_with_its_seqs_and_cursors(
    direction: str, tmp_path: Path, pg_server: PgServer
) -> None:
    from fedhpc.domain import Health, SiteState
    from fedhpc.store.dump import DumpError, export_rows, import_rows

    lite, pg = str(tmp_path / "a.db"), pg_server.create_database()
    source_url, target_url = (lite, pg) if direction.startswith("sqlite") else (pg, lite)
    source = await _open(source_url)
    await _group_of_children(source)
    async with source.transaction() as tx:
        await tx.put_group("g0", state="done", round_=1, body={}, at=T0)  # written after g1
        for i in range(5):
            await tx.append_event("task.terminal", f"t{i}", {"i": i}, at=T0, key=f"k{i}")
        await tx.set_cursor("bridge", 3, at=T0)
        await tx.mark_consumed("bridge", ["ev_x"], at=T0)
        await tx.put_delivery(
            "d1", event_id="ev_x", continuation_id="c1", state="pending", attempts=0,
            next_at=T0, body={}, at=T0,
        )  # fmt: skip
        await tx.save_site_states([SiteState(site="a", health=Health.OK, collected_at=T0)], keep=5)
        await tx.execute("DELETE FROM events WHERE seq = 0")  # a no-op the trigger allows
    lines = [line async for line in export_rows(source)]
    before = await _history(source)
    await source.close()

    target = await _open(target_url)
    try:
        counts = await import_rows(target, lines)
        assert (counts["tasks"], counts["events"], counts["groups"]) == (12, 5, 2)
        assert await _history(target) == before
        async with target.transaction() as tx:  # seqs go on after the imported ones
            ev = await tx.append_event("x", "s", {}, at=T0)
        assert ev is not None and ev.seq == 6
        with pytest.raises(DumpError, match="not empty"):
            await import_rows(target, lines)
    finally:
        await target.close()


async def test_the_store_command_migrates_reports_and_moves_a_store(
    tmp_path: Path, pg_server: PgServer
) -> None:
    """`fedhpc store migrate|status|export|import`, the real CLI, on the engine
    FEDHPC_STORE_URL names (unset: the SQLite file in FEDHPC_HOME)."""
    import json
    import os
    import subprocess
    import sys

    home = tmp_path / "home"
    base = {**os.environ, "FEDHPC_HOME": str(home)}
    base.pop("FEDHPC_STORE_URL", None)
    url = pg_server.create_database()

    def fedhpc(*argv: str, pg: bool = False) -> str:
        env = {**base, "FEDHPC_STORE_URL": url} if pg else base
        out = subprocess.run(
            [sys.executable, "-m", "fedhpc.cli.main", "store", *argv],
            env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        return out.stdout

    assert json.loads(fedhpc("status", "--json"))["exists"] is False
    assert json.loads(fedhpc("migrate", "--json"))["to"] == SCHEMA_VERSION
    status = json.loads(fedhpc("status", "--json", pg=True))
    assert (status["engine"], status["schema"]) == ("postgresql", 0)
    migrated = json.loads(fedhpc("migrate", "--json", pg=True))
    assert (migrated["from"], migrated["to"]) == (0, SCHEMA_VERSION)
    assert "fedhpc@127.0.0.1" in migrated["location"]
    s = await Store.open(home / "fedhpc.db")
    async with s.transaction() as tx:
        await tx.append_event("x", "s", {"a": 1}, at=T0)
    await s.close()
    dump = tmp_path / "store.jsonl"
    fedhpc("export", str(dump))
    assert json.loads(fedhpc("import", str(dump), "--json", pg=True))["events"] == 1
    status = json.loads(fedhpc("status", "--json", pg=True))
    assert (status["schema"], status["last_seq"], status["rows"]["events"]) == (
        SCHEMA_VERSION,
        1,
        1,
    )


async def test_owners_are_kept_and_scope_the_listing_on_either_engine(store: Store) -> None:
    """Schema 11 (issue 34): a group's owner reaches its children; a task's owner is set once
    (never moved to another person); a listing scoped to an owner holds only theirs."""
    await _group_of_children(store)
    async with store.transaction() as tx:
        await tx.put_task("solo", state="queued", body={"request": {"name": "s"}}, at=T0)
    assert await store.owner_of("tasks", "solo") == (True, None)
    assert await store.owner_of("tasks", "nope") == (False, None)
    await store.set_group_owner("g1", "iss|alice")
    await store.set_owner("tasks", ["solo"], "iss|bob")
    await store.set_owner("tasks", ["solo"], "iss|alice")  # already bob's: unchanged
    assert await store.owner_of("groups", "g1") == (True, "iss|alice")
    assert await store.owner_of("tasks", "t1-3") == (True, "iss|alice")
    assert await store.owner_of("tasks", "solo") == (True, "iss|bob")
    assert [r["id"] for r in await store.task_listing(owner="iss|bob")] == ["solo"]
    alice = await store.task_listing(owner="iss|alice", limit=100)
    assert len(alice) == 12 and "solo" not in {r["id"] for r in alice}
    done = await store.task_listing(state="completed", owner="iss|alice")
    assert [r["id"] for r in done] == ["t1-0"]
    assert await store.task_listing(state="completed", owner="iss|bob") == []
    assert len(await store.task_listing(limit=100)) == 13  # no owner given: every task
    assert await store.recent_groups_of("iss|alice", 5) == ["g1"]
    assert await store.recent_groups_of("iss|bob", 5) == []


async def test_owners_are_written_with_the_row_and_reach_what_follows_on_either_engine(
    store: Store,
) -> None:
    """Schema 12 (issue 34): a task's, a group's and its children's owner are written in the
    insert that creates them (no second statement: nothing ownerless in between); a
    continuation takes its subject's owner (task, group or transfer), a delivery its
    continuation's, a stage-out transfer its task's; an update never moves a row; and the
    event log scoped to an owner holds their transfers' events too."""
    async with store.transaction() as tx:
        await tx.put_task("ta", state="queued", body={}, at=T0, owner="iss|alice")
        await tx.put_task("ta", state="running", body={}, at=T0, owner="iss|bob")  # update
        await tx.put_group("gb", state="running", round_=1, body={}, at=T0, owner="iss|bob")
        await tx.insert_tasks([("gb-0", "gb:0", "gb", "queued", {})], at=T0, owner="iss|bob")
        await tx.put_group("gb", state="done", round_=2, body={}, at=T0, owner="iss|alice")
        await tx.execute(
            "INSERT INTO transfers (id, idempotency_key, created_at, updated_at, state, body, "
            "owner) VALUES ('xa', 'k', '', '', 'queued', '{}', 'iss|alice')"
        )
        for cid, subject in (("ca", "ta"), ("cb", "gb"), ("cx", "xa"), ("cn", "nobody")):
            await tx.put_continuation(cid, subject=subject, runtime="command", body={}, at=T0)
        await tx.put_delivery(
            "d1", event_id="e1", continuation_id="cx", state="pending", attempts=0,
            next_at=T0, body={}, at=T0,
        )  # fmt: skip
        await tx.append_event("transfer.succeeded", "xa", {}, at=T0)
        await tx.append_event("task.terminal", "gb-0", {}, at=T0)
    assert await store.owner_of("tasks", "ta") == (True, "iss|alice")
    assert await store.owner_of("groups", "gb") == (True, "iss|bob")
    assert await store.owner_of("tasks", "gb-0") == (True, "iss|bob")
    assert await store.owner_of("transfers", "xa") == (True, "iss|alice")
    owners = dict(await _rows(store, "SELECT id, owner FROM continuations ORDER BY id"))
    assert owners == {"ca": "iss|alice", "cb": "iss|bob", "cx": "iss|alice", "cn": None}
    assert await _rows(store, "SELECT owner FROM deliveries") == [("iss|alice",)]
    assert [d["id"] for d in await store.deliveries(owner="iss|alice")] == ["d1"]
    assert await store.deliveries(owner="iss|bob") == []
    assert len(await store.deliveries(states=["pending"])) == 1
    async with store.transaction() as tx:
        await tx.put_attempt(
            "ta", 1, site="s", partition="p", job_name="j", job_id="1", state="completed",
            body={"runtime_s": 60}, at=T0,
        )  # fmt: skip
    mine = await store.owned_attempts("iss|alice", 10)
    assert [(a["owner"], a["site"], a["body"]["runtime_s"]) for a in mine] == [
        ("iss|alice", "s", 60)
    ]
    assert await store.owned_attempts("iss|bob", 10) == []
    assert [a["owner"] for a in await store.owned_attempts(None, 10)] == ["iss|alice"]
    alice = [e.subject for e in await store.events_after(0, owner="iss|alice")]
    bob = [e.subject for e in await store.events_after(0, owner="iss|bob")]
    assert (alice, bob) == (["xa"], ["gb-0"])
