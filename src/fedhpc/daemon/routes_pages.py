"""The dashboard's paged listings: a page of GET /v1/tasks (`offset`, `find`) and of GET
/v1/groups (`offset`), each answered with `total`, how many the whole listing holds, so that a
person can reach every task and group and the page can say truthfully how many there are.

The store reads a task listing only as its newest N (`task_listing`): the page here is the
same statement (`store.reads.TASK_LISTING` and its PostgreSQL form) restricted to one page and
filtered in SQL, run through the store's read primitive, on the REST reader like every other
read of a request (`quick_reads`). Its home is the store; it is kept here, beside its only
route, while the store is outside the dashboard's change."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fedhpc.domain.job import JobState
from fedhpc.ops.task_views import TaskSummary
from fedhpc.store import Store, sql_pg
from fedhpc.store.reads import TASK_LISTING

__all__ = ["group_page", "task_page"]


def _paged(listing: str) -> str:
    """The listing's inner `LIMIT ?` given an `OFFSET ?` after it."""
    paged = listing.replace("LIMIT ?) t ", "LIMIT ? OFFSET ?) t ")
    if paged == listing:  # the store's statement changed its shape: page it here again
        raise RuntimeError("the store's task listing has no inner `LIMIT ?) t `")
    return paged


_PAGE_SQLITE = _paged(TASK_LISTING)
_PAGE_PG = _paged(sql_pg.TASK_LISTING)
_NAME = ("json_extract(body, '$.request.name')", "(body::jsonb #>> '{request,name}')")


def _like(text: str) -> str:
    """`text` anywhere, any case, its own `%`, `_` and `\\` taken literally (ESCAPE '\\')."""
    quoted = text.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{quoted}%"


def _where(
    store: Store, *, state: JobState | None, owner: str | None, find: str | None
) -> tuple[str, list[Any]]:
    """The tasks table's `WHERE ... ` (or nothing) for these filters, and its parameters."""
    conds: list[str] = []
    params: list[Any] = []
    if state is not None:
        conds.append("state = ?")
        params.append(state.value)
    if owner is not None:
        conds.append("owner = ?")
        params.append(owner)
    if find:
        name = store._pick(*_NAME)  # the store's engine's words (see the module's doc)
        conds.append(
            "(lower(id) LIKE ? ESCAPE '\\' OR lower(coalesce(group_id, '')) LIKE ? ESCAPE '\\' "  # noqa: S608
            f"OR lower(coalesce({name}, '')) LIKE ? ESCAPE '\\' OR EXISTS (SELECT 1 FROM "
            "attempts a WHERE a.task_id = tasks.id AND lower(a.site) LIKE ? ESCAPE '\\'))"
        )
        params += [_like(find)] * 4
    return (f"WHERE {' AND '.join(conds)} " if conds else ""), params


async def task_page(
    store: Store,
    *,
    state: JobState | None,
    owner: str | None,
    find: str | None,
    offset: int,
    limit: int,
) -> tuple[list[TaskSummary], int]:
    """One page of the task listing, newest first (as `fedhpc tasks`: each task's current
    attempt the accepted one, else the newest not superseded, else the newest), and how many
    tasks the filtered listing holds in all."""
    where, params = _where(store, state=state, owner=owner, find=find)
    # The store's own statement and read primitive (see the module's doc).
    sql = store._pick(_PAGE_SQLITE, _PAGE_PG).format(where=where)
    rows = await store._all(sql, [*params, limit, offset])
    counted = await store._all(f"SELECT count(*) AS n FROM tasks {where}", params)  # noqa: S608
    out: dict[str, dict[str, Any]] = {}
    for r in rows:  # as ListingReads.task_listing reads its rows
        row = out.setdefault(
            str(r["id"]),
            {"row": r, "attempts": 0, "attempt": None, "last": None},
        )
        if r["n"] is None:
            continue
        row["attempts"] += 1
        att = {"site": r["site"], "partition": r["partition"], "job_id": r["job_id"]}
        row["last"] = att
        if (r["n"] == r["accepted"]) if r["accepted"] is not None else not r["sup"]:
            row["attempt"] = att
    page = []
    for tid, row in out.items():
        r, cur = row["row"], row["attempt"] or row["last"] or {}
        page.append(
            TaskSummary(
                task_id=tid,
                name=r["name"],
                state=JobState(r["state"]),
                site=cur.get("site"),
                partition=cur.get("partition"),
                job_id=cur.get("job_id"),
                attempts=row["attempts"],
                group_id=r["group_id"],
                updated_at=datetime.fromisoformat(str(r["updated_at"])),
            )
        )
    return page, int(counted[0]["n"])


async def group_page(
    store: Store, *, owner: str | None, offset: int, limit: int
) -> tuple[list[str], int]:
    """The ids of one page of the newest groups (`owner`'s only, when given), newest first,
    and how many groups there are in all."""
    if owner is None:
        ids = await store.recent_groups(offset + limit)
        return ids[offset:], await store.count("groups")
    ids = await store.recent_groups_of(owner, offset + limit)
    counted = await store._all("SELECT count(*) AS n FROM groups WHERE owner = ?", (owner,))
    return ids[offset:], int(counted[0]["n"])
