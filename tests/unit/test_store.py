"""The store: migrations, WAL, the append-only event log, cursors written with their effect."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest

from fedhpc.domain import Health, SiteState
from fedhpc.domain.site import PartitionState
from fedhpc.store import Store
from fedhpc.store.schema import SCHEMA_VERSION

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


async def test_open_migrates_to_the_current_version_in_wal_mode(store: Store) -> None:
    assert await store.schema_version() == SCHEMA_VERSION
    conn = sqlite3.connect(store.path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    assert store.path.stat().st_mode & 0o777 == 0o600
    assert store.path.parent.stat().st_mode & 0o777 == 0o700


async def test_reopening_keeps_data_and_refuses_a_newer_schema(tmp_path: Path) -> None:
    path = tmp_path / "fedhpc.db"
    s = await Store.open(path)
    async with s.transaction() as tx:
        await tx.append_event("x", "t1", {}, at=T0)
    await s.close()
    s = await Store.open(path)
    assert await s.count("events") == 1
    await s.close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(RuntimeError, match="newer than this fedhpc"):
        await Store.open(path)


async def test_events_with_the_same_key_are_written_once(store: Store) -> None:
    async with store.transaction() as tx:
        first = await tx.append_event(
            "task.terminal", "t1", {"state": "completed"}, at=T0, key="t1:terminal:1"
        )
        again = await tx.append_event(
            "task.terminal", "t1", {"state": "completed"}, at=T0, key="t1:terminal:1"
        )
        other = await tx.append_event("task.terminal", "t2", {}, at=T0)
    assert first is not None
    assert again is None
    assert other is not None
    events = await store.events_after(0)
    assert [e.id for e in events] == [first.id, other.id]
    assert events[0].payload == {"state": "completed"}
    assert await store.events_after(first.seq) == [other]
    assert [e.id for e in await store.events_after(0, kinds=["nope"])] == []


async def test_event_log_is_append_only(store: Store) -> None:
    async with store.transaction() as tx:
        await tx.append_event("x", "s", {}, at=T0)
    for sql in ("UPDATE events SET kind = 'y'", "DELETE FROM events"):
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            async with store.transaction() as tx:
                await tx.execute(sql)
    assert await store.count("events") == 1


async def test_cursor_and_consumed_ids_commit_only_with_the_effect(store: Store) -> None:
    async with store.transaction() as tx:
        ev = await tx.append_event("x", "s", {}, at=T0)
    assert ev is not None

    class EffectFailed(Exception):
        pass

    async def consume_then_fail() -> None:
        async with store.transaction() as tx:
            await tx.put_task("t-effect", state="pending", body={}, at=T0)
            await tx.mark_consumed("bridge", [ev.id], at=T0)
            await tx.set_cursor("bridge", ev.seq, at=T0)
            raise EffectFailed

    with pytest.raises(EffectFailed):
        await consume_then_fail()
    assert await store.cursor("bridge") == 0
    assert await store.consumed("bridge", [ev.id]) == set()
    assert await store.get_task("t-effect") is None

    async with store.transaction() as tx:
        await tx.put_task("t-effect", state="pending", body={}, at=T0)
        await tx.mark_consumed("bridge", [ev.id], at=T0)
        await tx.set_cursor("bridge", ev.seq, at=T0)
    assert await store.cursor("bridge") == ev.seq
    assert await store.consumed("bridge", [ev.id, "ev_other"]) == {ev.id}
    async with store.transaction() as tx:
        await tx.set_cursor("bridge", 0, at=T0)  # a cursor never moves back
    assert await store.cursor("bridge") == ev.seq


async def _completed_attempt(store: Store, body: str) -> None:
    """Task t1 with one completed attempt whose body is `body` (JSON text, written as is)."""
    async with store.transaction() as tx:
        await tx.put_task("t1", state="completed", body={}, at=T0)
        await tx.execute(
            "INSERT INTO attempts (task_id, n, site, partition, job_name, job_id, state, "
            "created_at, updated_at, body) VALUES ('t1', 1, 's', 'p', 'j', '1', 'completed', "
            "?, ?, ?)",
            (T0.isoformat(), T0.isoformat(), body),
        )


async def test_snapshot_history_is_bounded_per_site(store: Store) -> None:
    for i in range(5):
        states = [
            SiteState(site=s, health=Health.OK, collected_at=T0 + timedelta(minutes=i))
            for s in ("a", "b")
        ]
        async with store.transaction() as tx:
            await tx.save_site_states(states, keep=3)
    assert await store.count("snapshots") == 6
    history = await store.site_history("a")
    assert [h.collected_at for h in history] == [T0 + timedelta(minutes=i) for i in (2, 3, 4)]
    latest = await store.latest_site_states()
    assert set(latest) == {"a", "b"}
    assert latest["b"].collected_at == T0 + timedelta(minutes=4)


async def test_a_sites_points_are_its_probes_reduced_in_sql(store: Store) -> None:
    """The dashboard's history read (GET /v1/federation/history) answers, per probe, what the
    probe's SiteState says, without building one: a partition left at its defaults reads 0."""
    probes = [
        SiteState(
            site="a",
            health=Health.OK if i else Health.DEGRADED,
            collected_at=T0 + timedelta(minutes=i),
            partitions=(
                PartitionState(
                    name="gpu", pending_jobs=3 + i, running_jobs=i, free_gpus=i, total_gpus=8
                ),
                PartitionState(name="cpu"),
            ),
        )
        for i in range(4)
    ]
    async with store.transaction() as tx:
        await tx.save_site_states(probes, keep=10)

    def point(st: SiteState) -> dict[str, object]:
        fields = ("name", "pending_jobs", "running_jobs", "free_gpus", "total_gpus")
        return {
            "at": st.collected_at.isoformat(),
            "health": st.health.value,
            "partitions": [{f: getattr(p, f) for f in fields} for p in st.partitions],
        }

    assert await store.site_points("a") == [point(st) for st in probes]
    assert await store.site_points("a", limit=2) == [point(st) for st in probes[2:]]
    before = T0 + timedelta(minutes=2)
    assert await store.site_points("a", before=before) == [point(st) for st in probes[:2]]
    assert await store.site_points("b") == []


async def test_idempotency_key_belongs_to_one_task(store: Store) -> None:
    async with store.transaction() as tx:
        assert await tx.put_task(
            "t1", state="submitted", body={"n": 1}, at=T0, idempotency_key="k1"
        )
        assert not await tx.put_task("t2", state="submitted", body={}, at=T0, idempotency_key="k1")
        assert await tx.put_task("t1", state="running", body={"n": 2}, at=T0)
    task = await store.task_by_key("k1")
    assert task is not None
    assert (task["id"], task["state"], task["body"]) == ("t1", "running", {"n": 2})
    assert await store.get_task("t2") is None


async def test_group_counts_and_sites_are_read_from_an_index_not_the_childrens_bodies(
    store: Store,
) -> None:
    """GET /v1/groups/{id} at 5,000 children: the per-state counts come from the index alone
    (schema 7) and so do the sites, from each task's current attempt's site (schema 10);
    before, both read and parsed every child's JSON body (and the sites every attempt's)."""
    from fedhpc.store.reads import GROUP_COUNTS, GROUP_SITES

    conn = sqlite3.connect(store.path)
    counts = [r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {GROUP_COUNTS}", ("g1",))]
    sites = [r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {GROUP_SITES}", ("g1",))]
    conn.close()
    assert any("COVERING INDEX tasks_group_state" in step for step in counts), counts
    assert any("COVERING INDEX tasks_group_site" in step for step in sites), sites


@pytest.mark.parametrize("after", [None, "t-0100"])
async def test_a_page_of_a_group_walks_its_ids_instead_of_sorting_every_child(
    store: Store, after: str | None
) -> None:
    """GET /v1/groups/{id} lists a page of children in id order: schema 9's index reads only
    the page's rows; before, every call sorted all 5,000 children with their bodies."""
    from fedhpc.store.reads import children_query

    sql, params = children_query("g1", after=after, limit=201, acting=())
    conn = sqlite3.connect(store.path)
    plan = [r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
    conn.close()
    assert any("INDEX tasks_group_page" in step for step in plan), plan


async def test_a_group_summary_is_one_read_with_counts_per_state_and_per_site(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counts per state and per site of the current attempts come back from one statement
    (one trip to the reader's thread), each under its own key."""
    async with store.transaction() as tx:
        await tx.put_group("g1", state="running", round_=1, body={}, at=T0)
        for i, state in enumerate(["completed", "completed", "running", "queued"]):
            tid = f"t{i}"
            await tx.put_task(tid, state=state, body={}, at=T0, group_id="g1")
            if state != "queued":
                await tx.put_attempt(
                    tid,
                    1,
                    site="s1" if i else "s2",
                    partition="p",
                    job_name=f"j{i}",
                    job_id=str(i),
                    state=state,
                    body={},
                    at=T0,
                )
    reads: list[str] = []
    real = type(store)._all

    async def counted(self: Store, sql: str, params: object = ()) -> object:
        reads.append(sql)
        return await real(self, sql, params)  # type: ignore[arg-type]

    monkeypatch.setattr(type(store), "_all", counted)
    summary = await store.group_summary("g1")
    assert len(reads) == 1
    assert summary == {
        "counts": {"completed": 2, "running": 1, "queued": 1},
        "sites": {"s1": 2, "s2": 1},
        "first": "t0",
        "last": "t3",
    }


_SITES_BEFORE_10 = (
    "SELECT a.site, count(*) AS n FROM tasks t JOIN attempts a ON a.task_id = t.id "
    "WHERE t.group_id = ? AND a.n = coalesce(json_extract(t.body, '$.accepted_attempt'),"
    " (SELECT max(b.n) FROM attempts b WHERE b.task_id = t.id"
    "  AND NOT coalesce(json_extract(b.body, '$.superseded'), 0))) GROUP BY a.site"
)


async def _current_sites(store: Store) -> dict[str, str | None]:
    conn = sqlite3.connect(store.path)
    rows = dict(conn.execute("SELECT id, current_site FROM tasks ORDER BY id").fetchall())
    conn.close()
    return rows


async def test_a_tasks_current_site_follows_every_attempt_write_and_the_accepted_one(
    store: Store,
) -> None:
    """Schema 10's triggers: the current attempt is the accepted one, else the newest not
    superseded; each write path (a new attempt, an attempt superseded, a task accepting an
    attempt) moves the task's current_site, so group counts per site stay exact."""

    async def attempt(n: int, site: str, body: dict[str, object]) -> None:
        async with store.transaction() as tx:
            await tx.put_attempt(
                "t1",
                n,
                site=site,
                partition="p",
                job_name=f"j{n}",
                job_id=str(n),
                state="submitted",
                body=body,
                at=T0,
            )

    async with store.transaction() as tx:
        await tx.put_task("t1", state="queued", body={}, at=T0)
    assert await _current_sites(store) == {"t1": None}  # no attempt yet
    await attempt(1, "s1", {})
    assert await _current_sites(store) == {"t1": "s1"}
    await attempt(2, "s2", {})
    assert await _current_sites(store) == {"t1": "s2"}  # the newest
    await attempt(2, "s2", {"superseded": True})  # replaced: back to the newest not superseded
    assert await _current_sites(store) == {"t1": "s1"}
    async with store.transaction() as tx:
        await tx.put_task("t1", state="completed", body={"accepted_attempt": 2}, at=T0)
    assert await _current_sites(store) == {"t1": "s2"}  # the accepted one wins


async def test_a_schema_9_store_migrates_to_10_with_its_tasks_current_sites(
    tmp_path: Path,
) -> None:
    """Migration 10 fills current_site for tasks written before it (same rule as the
    triggers), and the group summary counts them per site."""
    from fedhpc.store.schema import MIGRATIONS

    path = tmp_path / "fedhpc.db"
    conn = sqlite3.connect(path, isolation_level=None)
    for n, step in enumerate(MIGRATIONS[:9]):
        conn.executescript(f"BEGIN;\n{step}\nPRAGMA user_version = {n + 1};\nCOMMIT;")
    at = T0.isoformat()
    conn.execute(
        "INSERT INTO groups (id, created_at, state, round, body) "
        "VALUES ('g1', ?, 'running', 1, '{}')",
        (at,),
    )
    tasks = (
        ("t1", "{}"),  # its newest attempt superseded: the one before
        ("t2", '{"accepted_attempt": 1}'),  # accepted wins over a newer one
        ("t3", "{}"),  # no attempt
        ("t4", "{}"),  # every attempt superseded: none
        ("t5", '{"accepted_attempt": 2}'),  # accepted, though superseded
        ("t6", '{"accepted_attempt": 9}'),  # accepted names no attempt: none
    )
    for tid, body in tasks:
        conn.execute(
            "INSERT INTO tasks (id, group_id, created_at, updated_at, state, body) "
            "VALUES (?, 'g1', ?, ?, 'running', ?)",
            (tid, at, at, body),
        )
    for tid, n, site, body in (
        ("t1", 1, "s1", "{}"),
        ("t1", 2, "s2", '{"superseded": true}'),
        ("t2", 1, "s1", "{}"),
        ("t2", 2, "s2", "{}"),
        ("t4", 1, "s1", '{"superseded": true}'),
        ("t5", 1, "s1", "{}"),
        ("t5", 2, "s3", '{"superseded": true}'),
        ("t6", 1, "s1", "{}"),
    ):
        conn.execute(
            "INSERT INTO attempts (task_id, n, site, partition, job_name, job_id, state, "
            "created_at, updated_at, body) VALUES (?, ?, ?, 'p', ?, '7', 'running', ?, ?, ?)",
            (tid, n, site, f"j-{tid}-{n}", at, at, body),
        )
    # The rule schema 9 answered with, read from every attempt's body at each call.
    before = dict(conn.execute(_SITES_BEFORE_10, ("g1",)).fetchall())
    conn.close()

    s = await Store.open(path)
    try:
        assert await s.schema_version() == SCHEMA_VERSION
        assert await _current_sites(s) == {
            "t1": "s1",
            "t2": "s1",
            "t3": None,
            "t4": None,
            "t5": "s3",
            "t6": None,
        }
        assert (await s.group_summary("g1"))["sites"] == before == {"s1": 2, "s3": 1}
    finally:
        await s.close()


async def test_health_reads_the_schema_and_the_last_event_in_one_read(store: Store) -> None:
    assert await store.schema_and_last_seq() == (SCHEMA_VERSION, await store.last_seq())


async def test_the_wait_history_read_walks_an_index_instead_of_sorting_every_attempt(
    store: Store,
) -> None:
    """Store.wait_samples runs every control cycle (the learned estimator's history):
    schema 8's index gives the newest completed attempts in order, without a temporary b-tree
    of every completed attempt and its body."""
    from fedhpc.store.db import WAIT_SAMPLES

    conn = sqlite3.connect(store.path)
    plan = [r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {WAIT_SAMPLES}", (2000,))]
    conn.close()
    assert any("INDEX attempts_state_updated" in step for step in plan), plan
    assert not any("TEMP B-TREE" in step for step in plan), plan


async def test_the_wait_history_is_decoded_off_the_event_loops_thread(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Store.wait_samples (2,000 attempts every control cycle) makes its samples on a worker
    thread: the event loop keeps answering REST requests meanwhile."""
    import threading

    from fedhpc.store import db

    await _completed_attempt(store, '{"wait_s": 5, "shape": {"gpus": 0}}')
    decoded_on: list[int] = []
    real = db._sample

    def spy(row: object) -> db.WaitSample:
        decoded_on.append(threading.get_ident())
        return real(row)  # type: ignore[arg-type]

    monkeypatch.setattr(db, "_sample", spy)
    rows = await store.wait_samples()
    assert [(r.site, r.wait_s, r.gpus) for r in rows] == [("s", 5, 0)]
    assert decoded_on
    assert threading.get_ident() not in decoded_on


async def test_a_schema_7_store_migrates_to_8_and_keeps_its_completed_attempts(
    tmp_path: Path,
) -> None:
    """A store written by the previous fedhpc (schema 7: index attempts_state) opens with the
    current one: migration 8 swaps the index for attempts_state_updated, the rows stay, and the
    wait history reads them."""
    from fedhpc.store.schema import MIGRATIONS

    path = tmp_path / "fedhpc.db"
    conn = sqlite3.connect(path, isolation_level=None)
    for n, step in enumerate(MIGRATIONS[:7]):
        conn.executescript(f"BEGIN;\n{step}\nPRAGMA user_version = {n + 1};\nCOMMIT;")
    at = T0.isoformat()
    conn.execute(
        "INSERT INTO tasks (id, created_at, updated_at, state, body) "
        "VALUES ('t1', ?, ?, 'completed', '{}')",
        (at, at),
    )
    conn.execute(
        "INSERT INTO attempts (task_id, n, site, partition, job_name, job_id, state, "
        "created_at, updated_at, body) VALUES ('t1', 1, 's', 'p', 'fedhpc-t1-1', '7', "
        "'completed', ?, ?, ?)",
        (at, at, '{"wait_s": 12, "shape": {"gpus": 2, "cpus": 8, "nodes": 1}}'),
    )
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 7
    conn.close()

    s = await Store.open(path)
    try:
        assert await s.schema_version() == SCHEMA_VERSION
        conn = sqlite3.connect(path)
        indexes = {
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'attempts'"
            )
        }
        conn.close()
        assert "attempts_state_updated" in indexes
        assert "attempts_state" not in indexes
        samples = await s.wait_samples()
        assert [(r.site, r.partition, r.gpus, r.cpus, r.wait_s) for r in samples] == [
            ("s", "p", 2, 8, 12)
        ]
    finally:
        await s.close()


async def test_a_wait_sample_whose_body_lacks_the_shape_has_the_shapes_defaults(
    store: Store,
) -> None:
    """An attempt body without shape.gpus/cpus/nodes reads as Shape's defaults (0 GPUs, 1 CPU,
    1 node), never None in an int field."""
    from fedhpc.domain.job import Shape

    await _completed_attempt(store, '{"wait_s": 5}')
    [sample] = await store.wait_samples()
    d = Shape()
    assert (sample.gpus, sample.cpus, sample.nodes) == (d.gpus, d.cpus, d.nodes) == (0, 1, 1)
    assert sample.wait_s == 5


async def test_the_read_connection_has_a_small_page_cache(store: Store) -> None:
    """The dashboard's polling reads through the read-only connection: its page cache is
    capped (1 MiB) rather than SQLite's default 2 MiB held for the daemon's lifetime."""
    from fedhpc.store.db import READER_CACHE_SIZE

    assert store._quick is not None
    async with store._quick.execute("PRAGMA cache_size") as cur:
        row = await cur.fetchone()
    assert row is not None
    assert row[0] == READER_CACHE_SIZE == -1024


async def test_closing_closes_the_writer_even_if_the_reader_fails_to_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = await Store.open(tmp_path / "fedhpc.db")
    assert s._quick is not None

    async def broken() -> None:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(s._quick, "close", broken)
    quick = s._quick
    with pytest.raises(sqlite3.OperationalError):
        await s.close()
    assert not s._conn._running  # the writer's thread ended
    monkeypatch.undo()
    await quick.close()


async def test_a_read_connection_whose_setup_fails_is_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PRAGMA of the read connection that fails after it connected closes it: its thread
    does not outlive the failed open (nor does the writer's)."""
    import threading

    from fedhpc.store import db

    before = set(threading.enumerate())
    monkeypatch.setattr(db, "READER_CACHE_SIZE", "-1024; SELECT 1")  # two statements: refused
    with pytest.raises(sqlite3.Error):
        await Store.open(tmp_path / "fedhpc.db")
    new = [t for t in threading.enumerate() if t not in before]
    for t in new:  # a closed connection's thread ends just after close() returns
        await anyio.to_thread.run_sync(t.join, 30)
    assert [t for t in new if t.is_alive()] == []
