"""Reads the dashboard and the CLI's timelines share: a task's or a group's attempts as bars,
through the daemon's REST API (bounded: at most MAX_CHILDREN children of a group)."""

from __future__ import annotations

from typing import Any

import anyio

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.ops.task_views import GroupView, ResultManifest
from fedhpc.ops.tasks import ResultRequest

__all__ = [
    "MAX_CHILDREN",
    "MAX_GROUPS",
    "TASK_PAGE",
    "group_manifests",
    "group_summaries",
    "manifest",
    "task_page",
]

MAX_CHILDREN = 64  # a group's timeline shows at most this many children (the rest are counted)
MAX_GROUPS = 20  # the dashboard's group list: a page of the groups, newest first
TASK_PAGE = 200  # the dashboard's task list: a page of the tasks, newest first


async def manifest(client: DaemonClient, task_id: str) -> ResultManifest:
    """A task's full manifest (attempts with their times), without output tails."""
    return await client.get_result(ResultRequest(task_id=task_id, preview="none"))


async def group_manifests(
    client: DaemonClient, group_id: str, *, limit: int = MAX_CHILDREN, after: str | None = None
) -> tuple[GroupView, list[ResultManifest], int]:
    """The group, one page of its children's manifests in order (the first `limit`, or those
    after the child `after`), and how many children are not on this page."""
    group = await client.group(group_id, limit=limit, after=after)  # one page of children
    shown = group.children[:limit]
    found: dict[str, ResultManifest] = {}

    async def one(task_id: str) -> None:
        found[task_id] = await manifest(client, task_id)

    async with anyio.create_task_group() as tg:
        for child in shown:
            tg.start_soon(one, child.task_id)
    return group, [found[c.task_id] for c in shown], group.size - len(shown)


async def group_summaries(
    client: DaemonClient, *, offset: int = 0, limit: int = MAX_GROUPS
) -> dict[str, Any]:
    """A page of the groups, newest first (the `offset` newest skipped), each with the daemon's
    own counts over all its children (`GET /v1/groups`: counted in SQL, no child read), and
    how many groups there are in all (`total`)."""
    body = await client.group_page(offset=offset, limit=limit)
    fields = {"group_id", "objective", "state", "round", "size", "counts"}
    groups = [{k: g[k] for k in fields} for g in body["groups"]]
    return {"groups": groups, "offset": offset, "limit": limit, "total": body["total"]}


async def task_page(
    client: DaemonClient,
    *,
    state: str | None = None,
    find: str | None = None,
    offset: int = 0,
    limit: int = TASK_PAGE,
) -> dict[str, Any]:
    """A page of the tasks, newest first, filtered by the daemon in SQL (state; `find`: text in
    the id, name, group or a site an attempt went to), and how many match in all (`total`)."""
    body = await client.task_page(state=state, find=find, offset=offset, limit=limit)
    return {"tasks": body["tasks"], "offset": offset, "limit": limit, "total": body["total"]}
