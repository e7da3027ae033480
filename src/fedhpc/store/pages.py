"""The store's listings of tasks and groups (`fedhpc tasks`, GET /v1/tasks and /v1/groups): the
newest N, or a page of them (`offset`; tasks also by `find`) with `total`, how many the whole
listing holds, so that the dashboard reaches every task and group and says truthfully how many
there are. A mixin of `Store` (store/db.py), on either engine."""

from __future__ import annotations

from typing import Any

from fedhpc.store import sql_pg
from fedhpc.store.engine import Row
from fedhpc.store.reads import Reads

__all__ = ["GROUP_PAGE", "OWNED_GROUP_PAGE", "TASK_FIND", "TASK_LISTING", "ListingReads"]

# ListingReads.task_listing and .task_page (`{where}`: the optional filters, `{page}`: `LIMIT ?`
# or `LIMIT ? OFFSET ?`; both fixed text).
TASK_LISTING = (
    "SELECT t.id, t.state, t.group_id, t.updated_at, "
    "json_extract(t.body, '$.request.name') AS name, "
    "json_extract(t.body, '$.accepted_attempt') AS accepted, "
    "a.n, a.site, a.partition, a.job_id, json_extract(a.body, '$.superseded') AS sup "
    "FROM (SELECT * FROM tasks {where}ORDER BY created_at DESC, id {page}) t "
    "LEFT JOIN attempts a ON a.task_id = t.id ORDER BY t.created_at DESC, t.id, a.n"
)

# ListingReads.task_page's `find`: the text (four `?`, each a LIKE pattern with ESCAPE '\') in
# the task's id, group or name, or the site of one of its attempts.
TASK_FIND = (
    "(lower(id) LIKE ? ESCAPE '\\' OR lower(coalesce(group_id, '')) LIKE ? ESCAPE '\\' "
    "OR lower(coalesce(json_extract(body, '$.request.name'), '')) LIKE ? ESCAPE '\\' "
    "OR EXISTS (SELECT 1 FROM attempts a WHERE a.task_id = tasks.id "
    "AND lower(a.site) LIKE ? ESCAPE '\\'))"
)

# ListingReads.group_page, as GroupReads.recent_groups and OwnerReads.recent_groups_of order
# them (the same on both engines: PostgreSQL's `groups` keeps SQLite's rowid as a column).
GROUP_PAGE = "SELECT id FROM groups ORDER BY created_at DESC, rowid DESC LIMIT ? OFFSET ?"
OWNED_GROUP_PAGE = (
    "SELECT id FROM groups WHERE owner = ? ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?"
)


class ListingReads(Reads):
    """Task listings (`fedhpc tasks`, GET /v1/tasks) and pages of the tasks and of the groups
    (the dashboard's lists), at any store size."""

    async def task_listing(
        self, *, state: str | None = None, limit: int = 100, owner: str | None = None
    ) -> list[dict[str, Any]]:
        """Newest tasks first, each with its label and current attempt, in one query and
        without loading bodies into Python (a listing page at any store size); only `owner`'s
        when given (service mode)."""
        conds = [c for c, v in (("state = ?", state), ("owner = ?", owner)) if v]
        params = [v for v in (state, owner) if v]
        where = f"WHERE {' AND '.join(conds)} " if conds else ""
        sql = self._pick(TASK_LISTING, sql_pg.TASK_LISTING).format(where=where, page="LIMIT ?")
        return _listed(await self._all(sql, [*params, limit]))

    async def task_page(
        self,
        *,
        state: str | None = None,
        owner: str | None = None,
        find: str | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> tuple[list[dict[str, Any]], int]:
        """One page of the task listing, newest first, after its first `offset` tasks (rows as
        `task_listing`'s), filtered in SQL: `state`, `owner`'s only (service mode), and with
        `find` only tasks whose id, name or group, or a site one of its attempts went to,
        holds that text (any case, its `%`, `_` and `\\` taken literally); and how many tasks
        the filtered listing holds in all."""
        conds: list[str] = []
        params: list[Any] = []
        if state is not None:
            conds.append("state = ?")
            params.append(state)
        if owner is not None:
            conds.append("owner = ?")
            params.append(owner)
        if find:
            conds.append(self._pick(TASK_FIND, sql_pg.TASK_FIND))
            params += [_like(find)] * 4
        where = f"WHERE {' AND '.join(conds)} " if conds else ""
        sql = self._pick(TASK_LISTING, sql_pg.TASK_LISTING)
        rows = await self._all(
            sql.format(where=where, page="LIMIT ? OFFSET ?"), [*params, limit, offset]
        )
        counted = await self._all(f"SELECT count(*) AS n FROM tasks {where}", params)  # noqa: S608 (fixed text)
        return _listed(rows), int(counted[0]["n"])

    async def group_page(
        self, *, owner: str | None = None, offset: int = 0, limit: int = 20
    ) -> tuple[list[str], int]:
        """The ids of one page of the groups (`owner`'s only, when given), newest first, after
        the newest `offset`; and how many groups there are in all (`owner`'s)."""
        if owner is None:
            rows = await self._all(GROUP_PAGE, (limit, offset))
            counted = await self._all("SELECT count(*) AS n FROM groups")
        else:
            rows = await self._all(OWNED_GROUP_PAGE, (owner, limit, offset))
            counted = await self._all("SELECT count(*) AS n FROM groups WHERE owner = ?", (owner,))
        return [str(r["id"]) for r in rows], int(counted[0]["n"])


def _like(text: str) -> str:
    """`text` anywhere, any case, its own `%`, `_` and `\\` taken literally (ESCAPE '\\')."""
    quoted = text.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{quoted}%"


def _listed(rows: list[Row]) -> list[dict[str, Any]]:
    """TASK_LISTING's rows (a task's once per attempt) as one row per task, in their order,
    each with its current attempt as get_result picks it: the accepted one, else the newest
    not superseded, else the newest."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        row = out.setdefault(
            str(r["id"]),
            {
                "id": r["id"],
                "state": r["state"],
                "group_id": r["group_id"],
                "name": r["name"],
                "updated_at": r["updated_at"],
                "attempts": 0,
                "attempt": None,
                "last": None,
            },
        )
        if r["n"] is None:
            continue
        row["attempts"] += 1
        att = {"site": r["site"], "partition": r["partition"], "job_id": r["job_id"]}
        row["last"] = att
        if (r["n"] == r["accepted"]) if r["accepted"] is not None else not r["sup"]:
            row["attempt"] = att
    for row in out.values():  # as get_result: the accepted, else newest live, else newest
        row["attempt"] = row["attempt"] or row.pop("last")
        row.pop("last", None)
    return list(out.values())
