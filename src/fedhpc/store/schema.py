"""The store's schema as numbered migrations; `PRAGMA user_version` records how far a file is."""

from __future__ import annotations

# A task's current attempt's site: the accepted attempt, else the newest not superseded (as
# GroupReads.group_children reads it); `{task}` is the task id's expression in the statement.
_CURRENT_SITE = (
    "(SELECT a.site FROM attempts a WHERE a.task_id = {task} AND a.n = coalesce("
    "(SELECT json_extract(t.body, '$.accepted_attempt') FROM tasks t WHERE t.id = {task}), "
    "(SELECT max(b.n) FROM attempts b WHERE b.task_id = {task} "
    "AND NOT coalesce(json_extract(b.body, '$.superseded'), 0))))"
)

__all__ = ["MIGRATIONS", "SCHEMA_VERSION"]

# Each entry moves the schema from version i to i+1. Never edit a shipped entry: append one.
MIGRATIONS: tuple[str, ...] = (
    # 1: snapshots, tasks, attempts, groups, transfers, continuations, the event log, consumers.
    """
    CREATE TABLE snapshots (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        site TEXT NOT NULL,
        collected_at TEXT NOT NULL,
        health TEXT NOT NULL,
        state TEXT NOT NULL                -- SiteState as JSON
    );
    CREATE INDEX snapshots_site ON snapshots (site, seq);

    CREATE TABLE groups (
        id TEXT PRIMARY KEY,
        created_at TEXT NOT NULL,
        state TEXT NOT NULL,
        round INTEGER NOT NULL DEFAULT 0,
        body TEXT NOT NULL                 -- objective, envelope, policy as JSON
    );

    CREATE TABLE tasks (
        id TEXT PRIMARY KEY,
        idempotency_key TEXT UNIQUE,
        group_id TEXT REFERENCES groups (id),
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        state TEXT NOT NULL,
        body TEXT NOT NULL                 -- envelope, command, placement, trace as JSON
    );
    CREATE INDEX tasks_state ON tasks (state);

    CREATE TABLE attempts (
        task_id TEXT NOT NULL REFERENCES tasks (id),
        n INTEGER NOT NULL,
        site TEXT NOT NULL,
        partition TEXT NOT NULL,
        job_name TEXT NOT NULL,            -- fedhpc-<task>-<attempt>: found again after a crash
        job_id TEXT,
        state TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (task_id, n)
    );
    CREATE INDEX attempts_state ON attempts (state);

    CREATE TABLE transfers (
        id TEXT PRIMARY KEY,
        idempotency_key TEXT UNIQUE,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        state TEXT NOT NULL,
        body TEXT NOT NULL
    );

    CREATE TABLE continuations (
        id TEXT PRIMARY KEY,
        subject TEXT NOT NULL,             -- task or group id
        runtime TEXT NOT NULL,
        created_at TEXT NOT NULL,
        body TEXT NOT NULL
    );
    CREATE INDEX continuations_subject ON continuations (subject);

    -- Append-only: rows are never updated or deleted. `seq` orders them; `id` is stable and
    -- unique, so appending the same event twice conflicts instead of duplicating it.
    CREATE TABLE events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        kind TEXT NOT NULL,
        subject TEXT NOT NULL,
        created_at TEXT NOT NULL,
        payload TEXT NOT NULL
    );
    CREATE TRIGGER events_no_update BEFORE UPDATE ON events
        BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
    CREATE TRIGGER events_no_delete BEFORE DELETE ON events
        BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;

    CREATE TABLE consumers (
        name TEXT PRIMARY KEY,
        cursor INTEGER NOT NULL DEFAULT 0,
        updated_at TEXT NOT NULL
    );
    CREATE TABLE consumed (
        consumer TEXT NOT NULL REFERENCES consumers (name),
        event_id TEXT NOT NULL,
        PRIMARY KEY (consumer, event_id)
    );
    """,
    # 2: the resume bridge: deliveries of events to continuations, and reported agent sessions.
    """
    CREATE TABLE deliveries (
        id TEXT PRIMARY KEY,               -- event id + continuation id: one resume per pair
        event_id TEXT NOT NULL,
        continuation_id TEXT NOT NULL,
        state TEXT NOT NULL,               -- pending | started | delivered | dead
        attempts INTEGER NOT NULL DEFAULT 0,
        next_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        body TEXT NOT NULL                 -- payload, runtime record, last error
    );
    CREATE INDEX deliveries_state ON deliveries (state, next_at);

    CREATE TABLE sessions (
        cwd TEXT NOT NULL,
        runtime TEXT NOT NULL,
        session_id TEXT NOT NULL,
        reported_at TEXT NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (runtime, cwd)
    );
    """,
    # 3: bindings of Claude Code tool calls to their session (the PreToolUse hook reports them).
    """
    CREATE TABLE bindings (
        tool_use_id TEXT PRIMARY KEY,
        session_id TEXT NOT NULL,
        reported_at TEXT NOT NULL,
        body TEXT NOT NULL
    );
    CREATE INDEX bindings_reported ON bindings (reported_at);
    """,
    # 4: submissions accepted before placement: tasks queued in fedhpc (found oldest first), a
    # group's children by group, and the retry window's lookup (caller + request digest).
    """
    ALTER TABLE tasks ADD COLUMN dedupe TEXT;
    ALTER TABLE groups ADD COLUMN dedupe TEXT;
    CREATE INDEX tasks_dedupe ON tasks (dedupe, created_at);
    CREATE INDEX groups_dedupe ON groups (dedupe, created_at);
    CREATE INDEX tasks_state_created ON tasks (state, created_at);
    CREATE INDEX tasks_group ON tasks (group_id);
    """,
    # 5: task listings at volume (`fedhpc tasks`, GET /v1/tasks): newest first without sorting
    # the whole table, with or without a state.
    """
    CREATE INDEX tasks_listing ON tasks (created_at DESC, id);
    CREATE INDEX tasks_state_listing ON tasks (state, created_at DESC, id);
    """,
    # 6: archiving delivered events (store/archive.py): the log stays append-only for everyone
    # else; only a transaction that holds a row in `archiving` may delete from it.
    """
    CREATE TABLE archiving (started_at TEXT NOT NULL);
    DROP TRIGGER events_no_delete;
    CREATE TRIGGER events_no_delete BEFORE DELETE ON events
        WHEN NOT EXISTS (SELECT 1 FROM archiving)
        BEGIN SELECT RAISE(ABORT, 'events are append-only (archive-events moves old ones)');
        END;
    CREATE INDEX events_created ON events (created_at);
    CREATE INDEX deliveries_event ON deliveries (event_id);
    """,
    # 7: a group's counts and sites (GET /v1/groups/{id}, every group answer) from indexes
    # alone: without them each call parsed every child's JSON body (5,000 children: hundreds of
    # ms on the store's one connection, which every REST call waits behind). The expressions
    # is the one Store.group_summary uses, word for word (SQLite matches them as written).
    """
    CREATE INDEX tasks_group_state ON tasks (
        group_id, state, id, json_extract(body, '$.accepted_attempt'));
    DROP INDEX tasks_group;
    """,
    # 8: the learned wait estimator's history (Store.wait_samples: the newest 2,000
    # completed attempts, read every control cycle) walks an index instead of sorting every
    # completed attempt with its body (10,000 attempts: ~8 MB through a temporary b-tree, on the
    # connection every other read and write waits behind). Still serves `state IN (...)`.
    """
    CREATE INDEX attempts_state_updated ON attempts (state, updated_at);
    DROP INDEX attempts_state;
    """,
    # 9: a page of a group's children (GET /v1/groups/{id}: `ORDER BY id LIMIT n` after an id)
    # walks the group's ids in order and reads only the page's rows; with tasks_group_state
    # alone each page sorted every child with its body (5,000 children: a temporary b-tree of
    # ~5 MB per call, polled by every person and agent watching the group).
    """
    CREATE INDEX tasks_group_page ON tasks (group_id, id);
    """,
    # 10: the site of each task's current attempt (the accepted one, else the newest not
    # superseded) kept in its row by triggers, on every write path, so a group's count per
    # site (GET /v1/groups/{id}, every group answer) reads one index: before, each call
    # parsed every child's attempts (5,000 children: 10 -> 3.5 ms of the reader's thread a
    # call). A write recomputes it only when the answer can change: a new attempt, a change of
    # its `superseded`, a change of the task's `accepted_attempt` (an attempt's site never
    # moves); every other update of a body pays two small json_extracts to find that out.
    f"""
    ALTER TABLE tasks ADD COLUMN current_site TEXT;
    UPDATE tasks SET current_site = {_CURRENT_SITE.format(task="tasks.id")};
    CREATE INDEX tasks_group_site ON tasks (group_id, current_site);
    CREATE TRIGGER attempts_current_site_insert AFTER INSERT ON attempts BEGIN
        UPDATE tasks SET current_site = {_CURRENT_SITE.format(task="NEW.task_id")}
        WHERE id = NEW.task_id;
    END;
    CREATE TRIGGER attempts_current_site_update AFTER UPDATE ON attempts
    WHEN coalesce(json_extract(OLD.body, '$.superseded'), 0)
        IS NOT coalesce(json_extract(NEW.body, '$.superseded'), 0) BEGIN
        UPDATE tasks SET current_site = {_CURRENT_SITE.format(task="NEW.task_id")}
        WHERE id = NEW.task_id;
    END;
    CREATE TRIGGER tasks_current_site AFTER UPDATE OF body ON tasks
    WHEN json_extract(OLD.body, '$.accepted_attempt')
        IS NOT json_extract(NEW.body, '$.accepted_attempt') BEGIN
        UPDATE tasks SET current_site = {_CURRENT_SITE.format(task="NEW.id")}
        WHERE id = NEW.id;
    END;
    """,  # noqa: S608 (fixed text: no value is spliced)
    # 11: the person a task or group belongs to in service mode (`issuer|sub`; NULL without
    # `[service]`), and one person's tasks newest first (GET /v1/tasks scoped to an owner).
    """
    ALTER TABLE tasks ADD COLUMN owner TEXT;
    ALTER TABLE groups ADD COLUMN owner TEXT;
    CREATE INDEX tasks_owner_listing ON tasks (owner, created_at DESC, id);
    """,
    # 12: the person a transfer, a continuation and a delivery belong to (service mode; NULL
    # without `[service]`), written in the transaction that creates the row; one person's
    # transfers (their events, GET /v1/transfers/{id}) found by index.
    """
    ALTER TABLE transfers ADD COLUMN owner TEXT;
    ALTER TABLE continuations ADD COLUMN owner TEXT;
    ALTER TABLE deliveries ADD COLUMN owner TEXT;
    CREATE INDEX transfers_owner ON transfers (owner, created_at);
    """,
)

SCHEMA_VERSION = len(MIGRATIONS)
