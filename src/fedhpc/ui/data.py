"""Reads the dashboard and the CLI's timelines share: a task's or a group's attempts as bars,
through the daemon's REST API (bounded: at most MAX_CHILDREN children of a group)."""

from __future__ import annotations

from typing import Any

import anyio

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.ops.task_views import GroupView, ResultManifest
from fedhpc.ops.tasks import ResultRequest

__all__ = ["MAX_CHILDREN", "MAX_GROUPS", "group_manifests", "group_summaries", "manifest"]

MAX_CHILDREN = 64  # a group's timeline shows at most this many children (the rest are counted)
MAX_GROUPS = 20  # the dashboard's group list: the newest groups, at most this many


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


async def group_summaries(client: DaemonClient, *, limit: int = MAX_GROUPS) -> list[dict[str, Any]]:
    """The newest groups, newest first, each with the daemon's own counts over all its children
    (`GET /v1/groups`: counted in SQL, no child read)."""
    fields = {"group_id", "objective", "state", "round", "size", "counts"}
    return [g.model_dump(mode="json", include=fields) for g in await client.groups(limit)]
