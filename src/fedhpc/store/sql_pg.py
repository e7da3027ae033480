"""PostgreSQL's spelling of the store's statements that SQLite says its own way (JSON fields,
the newest seq, scalar min and max, one upsert with two conflicts). Each answers exactly as its
SQLite twin, named in its comment, with the same columns in the same order. Bodies are JSON
text (as in SQLite), read as jsonb where a field is needed."""

from __future__ import annotations

__all__ = [
    "APPEND_EVENT",
    "ARCHIVE_ELIGIBLE",
    "AS_SUBMITTED",
    "HISTORY_POINTS",
    "LAST_SEQ",
    "NOTIFY_EVENTS",
    "PENDING_BUDGETS",
    "PUT_TASK_INSERT",
    "PUT_TASK_UPDATE",
    "PUT_TRANSFER_INSERT",
    "PUT_TRANSFER_UPDATE",
    "SET_QUEUED_DECISION",
    "TASK_FIND",
    "TASK_LISTING",
    "WAIT_SAMPLES",
    "children_fields",
]

# db.WAIT_SAMPLES
WAIT_SAMPLES = """
SELECT site, partition, coalesce((b #>> '{shape,gpus}')::bigint, 0),
    coalesce((b #>> '{shape,cpus}')::bigint, 1), coalesce((b #>> '{shape,nodes}')::bigint, 1),
    (b ->> 'wait_s')::float8, b ->> 'started_at', b ->> 'ended_at',
    nullif(b -> 'predicted_waits', 'null'::jsonb)::text
FROM (SELECT site, partition, updated_at, body::jsonb AS b FROM attempts
      WHERE state = 'completed' ORDER BY updated_at DESC LIMIT ?) AS newest
ORDER BY updated_at DESC
"""

# db._LAST_SEQ: the sequence keeps the newest seq given after archiving moved the rows out.
LAST_SEQ = (
    "SELECT greatest((SELECT CASE WHEN is_called THEN last_value ELSE 0 END "
    "FROM events_seq_seq), (SELECT coalesce(max(seq), 0) FROM events)) AS seq, "
    "(SELECT max(version) FROM fedhpc_schema) AS schema"
)

# Tx.append_event: a seq is drawn only for an event written (ON CONFLICT DO NOTHING would
# draw one for a duplicate too), so seqs go up by one as in SQLite but after a rollback.
# Parameters: (id, kind, subject, created_at, payload, id).
APPEND_EVENT = (
    "INSERT INTO events (id, kind, subject, created_at, payload) "
    "SELECT ?, ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM events WHERE id = ?) RETURNING seq"
)

# Tx.append_event: the other daemons learn of the new events at commit (store/listen.py).
NOTIFY_EVENTS = "SELECT pg_notify('fedhpc_events', ?)"

# Store.pending_budgets
PENDING_BUDGETS = (
    "SELECT id, nullif(body::jsonb #> '{request,adaptation}', 'null'::jsonb)::text "
    "AS adaptation, body::jsonb ->> 'replacements_used' AS used FROM tasks "
    "WHERE id IN (SELECT task_id FROM attempts WHERE state = 'pending')"
)

# tx.AS_SUBMITTED
AS_SUBMITTED = (
    "NOT fedhpc_truthy(body::jsonb -> 'reopened') "
    "AND coalesce(body::jsonb -> 'excluded_sites', '[]') IN ('[]'::jsonb, 'null'::jsonb) "
    "AND coalesce(body::jsonb -> 'refused_sites', '[]') IN ('[]'::jsonb, 'null'::jsonb)"
)

# Tx.set_queued_decision
SET_QUEUED_DECISION = (
    "UPDATE tasks SET body = jsonb_set(body::jsonb, '{decision}', to_jsonb(?::text))::text, "  # noqa: S608 (fixed text)
    f"updated_at = ? WHERE group_id = ? AND state = 'queued' AND {AS_SUBMITTED} "
    "AND coalesce(body::jsonb ->> 'decision', '') != ?"
)

# Tx.put_task's one SQLite statement (insert, or update by id, or nothing when the key is
# another task's) as two: PostgreSQL takes one ON CONFLICT clause. Writers are serialized
# (pg.WRITE_LOCK), so nothing comes between them.
PUT_TASK_INSERT = (
    "INSERT INTO tasks (id, idempotency_key, group_id, created_at, updated_at, state, body, "
    "dedupe, owner) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
)
PUT_TASK_UPDATE = (
    "UPDATE tasks SET state = ?, body = ?, updated_at = ?, dedupe = coalesce(?, dedupe) "
    "WHERE id = ?"
)
# transfer/records.put, likewise.
PUT_TRANSFER_INSERT = (
    "INSERT INTO transfers (id, idempotency_key, created_at, updated_at, state, body, owner) "
    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
)
PUT_TRANSFER_UPDATE = "UPDATE transfers SET state = ?, body = ?, updated_at = ? WHERE id = ?"

# reads.children_query's fields of a task's and of an attempt's body, as one JSON array each,
# and the joins that parse each body once per row (`tj.b`, `aj.b`): `body::jsonb` written in
# each field would parse it once per field (a 200-child page of 5,000: 13.8 -> 6.6 ms).
_TASK_FIELDS = (
    "json_build_array(tj.b #> '{request,name}', tj.b -> 'decision', tj.b -> 'reasons', "
    "tj.b -> 'accepted_attempt', tj.b -> 'spread_relaxed')::text"
)
_ATTEMPT_FIELDS = (
    "CASE WHEN a.body IS NULL THEN NULL ELSE json_build_array(aj.b -> 'superseded', "
    "aj.b -> 'pending_since', aj.b -> 'account', aj.b -> 'shape')::text END"
)
_CHILDREN_FROM = (
    "FROM ({page}) t CROSS JOIN LATERAL (SELECT t.body::jsonb AS b) tj "
    "LEFT JOIN attempts a ON a.task_id = t.id "
    "LEFT JOIN LATERAL (SELECT a.body::jsonb AS b) aj ON true"
)


def children_fields() -> tuple[str, str, str]:
    """The task fields, the attempt fields and the FROM clause (`{page}`: the page's query)."""
    return _TASK_FIELDS, _ATTEMPT_FIELDS, _CHILDREN_FROM


# pages.TASK_LISTING (`{where}`: the optional filters, `{page}`: `LIMIT ?` or `LIMIT ?
# OFFSET ?`, fixed text); each body parsed once per row (`tj.b`, `aj.b`).
TASK_LISTING = (
    "SELECT t.id, t.state, t.group_id, t.updated_at, "
    "tj.b #>> '{{request,name}}' AS name, (tj.b ->> 'accepted_attempt')::bigint AS accepted, "
    "a.n, a.site, a.partition, a.job_id, fedhpc_truthy(aj.b -> 'superseded') AS sup "
    "FROM (SELECT * FROM tasks {where}ORDER BY created_at DESC, id {page}) t "
    "CROSS JOIN LATERAL (SELECT t.body::jsonb AS b) tj "
    "LEFT JOIN attempts a ON a.task_id = t.id "
    "LEFT JOIN LATERAL (SELECT a.body::jsonb AS b) aj ON true "
    "ORDER BY t.created_at DESC, t.id, a.n"
)

# pages.TASK_FIND: the task's name as text, `(body::jsonb #>> '{request,name}')`.
TASK_FIND = (
    "(lower(id) LIKE ? ESCAPE '\\' OR lower(coalesce(group_id, '')) LIKE ? ESCAPE '\\' "
    "OR lower(coalesce((body::jsonb #>> '{request,name}'), '')) LIKE ? ESCAPE '\\' "
    "OR EXISTS (SELECT 1 FROM attempts a WHERE a.task_id = tasks.id "
    "AND lower(a.site) LIKE ? ESCAPE '\\'))"
)

# reads.HISTORY_POINTS: JSON null fields read as 0, as SQLite's coalesce(json_extract) does.
_FIELD = "coalesce(nullif(p -> '{0}', 'null'::jsonb), '0'::jsonb)"
HISTORY_POINTS = f"""
SELECT s.collected_at, s.health, (
    SELECT coalesce(json_agg(json_build_object(
        'name', p -> 'name',
        'pending_jobs', {_FIELD.format("pending_jobs")},
        'running_jobs', {_FIELD.format("running_jobs")},
        'free_gpus', {_FIELD.format("free_gpus")},
        'total_gpus', {_FIELD.format("total_gpus")}) ORDER BY o), '[]'::json)
    FROM jsonb_array_elements(s.state::jsonb -> 'partitions') WITH ORDINALITY AS e(p, o)
)::text AS partitions
FROM snapshots AS s WHERE s.site = ?
"""  # noqa: S608 (fixed text: no value is spliced)

# archive._ELIGIBLE, with its numbered marks repeated: (cutoff, bridge, cutoff, after, batch).
ARCHIVE_ELIGIBLE = """
    SELECT e.seq, e.id, e.kind, e.subject, e.created_at, e.payload FROM events e
    WHERE e.created_at < ? AND e.seq <= least(
        coalesce((SELECT cursor FROM consumers WHERE name = ?), 0),
        coalesce((SELECT min(cursor) FROM consumers WHERE updated_at >= ?), e.seq))
      AND NOT EXISTS (SELECT 1 FROM deliveries d
                      WHERE d.event_id = e.id AND d.state IN ('pending', 'started'))
      AND NOT (e.kind IN ('site.offline', 'site.online') AND e.seq = (
          SELECT max(x.seq) FROM events x WHERE x.kind = e.kind AND x.subject = e.subject))
      AND e.seq > ?
    ORDER BY e.seq LIMIT ?
"""
