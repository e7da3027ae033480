"""Task groups: children share objective, envelope, round and policy; spread across systems
is soft and is relaxed for a child still pending when its siblings are done."""

from __future__ import annotations

import hashlib
from typing import Any, Literal

import structlog

from fedhpc.domain.job import JobState
from fedhpc.ops.tasks import GroupView, SubmitGroupRequest, SubmitTaskRequest, TaskHandle
from fedhpc.orchestrator.records import AttemptRecord, TaskRecord
from fedhpc.orchestrator.service import Orchestrator, TaskNotFound

__all__ = ["advance_groups", "group_view", "submit_group"]

log = structlog.get_logger(__name__)

GroupState = Literal["running", "completed", "failed", "cancelled"]


def _key(req: SubmitGroupRequest) -> str:
    return req.idempotency_key or (
        "sha256:" + hashlib.sha256(req.model_dump_json().encode()).hexdigest()
    )


async def submit_group(o: Orchestrator, req: SubmitGroupRequest) -> GroupView:
    """Place and dispatch every child; with `spread`, each child avoids its elder siblings'
    systems while another feasible one exists."""
    key = _key(req)
    gid = "g" + hashlib.sha256(key.encode()).hexdigest()[:11]
    if await o.store.get_group(gid) is None:
        async with o.store.transaction() as tx:
            await tx.put_group(gid, state="running", round_=1, at=o.clock(),
                               body={"objective": req.objective, "key": key,
                                     "required": [c.required for c in req.children],
                                     "spread": req.spread})  # fmt: skip
    if req.continuation is not None:
        await o.register(gid, req.continuation)
    used: list[str] = []
    for i, child in enumerate(req.children):
        handle = await o.submit_task(
            SubmitTaskRequest(
                command=child.command, envelope=req.envelope, name=child.name,
                policy=req.policy, workdir=req.workdir, env=req.env, adaptation=req.adaptation,
                idempotency_key=f"{key}:child:{i}",
            ),
            group_id=gid,
            avoid_sites=tuple(used) if req.spread else (),
        )  # fmt: skip
        if handle.site:
            used.append(handle.site)
    return await group_view(o, gid)


async def _children(o: Orchestrator, gid: str) -> list[tuple[TaskRecord, AttemptRecord | None]]:
    rows = await o.store.list_tasks(group_id=gid, limit=10_000)
    out = []
    for row in rows:
        task = TaskRecord.model_validate(row["body"])
        atts = [a for a in await o.load_attempts(task.id) if not a.superseded]
        out.append((task, atts[-1] if atts else None))
    return sorted(out, key=lambda ta: int(ta[0].idempotency_key.rsplit(":", 1)[1]))


def _state(children: list[tuple[TaskRecord, AttemptRecord | None]]) -> GroupState:
    states = [t.state for t, _ in children]
    if not all(s.terminal for s in states):
        return "running"
    if all(s is JobState.COMPLETED for s in states):
        return "completed"
    if all(s is JobState.CANCELLED for s in states):
        return "cancelled"
    return "failed"


async def group_view(o: Orchestrator, gid: str) -> GroupView:
    group = await o.store.get_group(gid)
    if group is None:
        raise TaskNotFound(f"no group {gid!r}")
    children = await _children(o, gid)
    counts: dict[str, int] = {}
    for task, _ in children:
        counts[task.state.value] = counts.get(task.state.value, 0) + 1
    handles: list[TaskHandle] = [o.handle(t, a) for t, a in children]
    return GroupView(
        group_id=gid, objective=str(group["body"]["objective"]), state=_state(children),
        round=int(group["round"]), children=tuple(handles), counts=counts,
    )  # fmt: skip


async def advance_groups(o: Orchestrator) -> None:
    """Relax spread for a child stalled behind finished siblings; close finished rounds."""
    from fedhpc.orchestrator.control import replace_if_better

    for gid in await o.store.groups_in(("running",)):
        group = await o.store.get_group(gid)
        assert group is not None
        body: dict[str, Any] = group["body"]
        children = await _children(o, gid)
        required = body.get("required") or [True] * len(children)
        if len(children) < len(required):
            continue  # submit_group is still adding children: no round can be over yet
        for i, (task, att) in enumerate(children):
            siblings = [t for j, (t, _) in enumerate(children) if j != i]
            stalled = (
                att is not None and att.state is JobState.PENDING and not task.spread_relaxed
                and siblings and all(s.state.terminal for s in siblings)
            )  # fmt: skip
            if stalled and att is not None:
                task.spread_relaxed = True
                moved = await replace_if_better(o, task, att, margin_s=0.0)
                if not moved:
                    async with o.store.transaction() as tx:
                        await o.save(tx, task, at=o.clock())
                        await tx.append_event(
                            "group.stalled_child", gid,
                            {"group_id": gid, "task_id": task.id, "site": att.site,
                             "reason": att.reason or "pending", "result": f"fedhpc://groups/{gid}"},
                            at=o.clock(), key=f"group.stalled_child:{gid}:{task.id}",
                        )  # fmt: skip
                log.info("relaxed spread", group=gid, task=task.id, moved=moved)
        done = all(t.state.terminal for (t, _), req in zip(children, required, strict=False) if req)
        if not done:
            continue
        view = await group_view(o, gid)
        state = view.state if view.state != "running" else "completed"
        async with o.store.transaction() as tx:
            await tx.put_group(gid, state=state, round_=int(group["round"]), body=body,
                               at=o.clock())  # fmt: skip
            await tx.append_event(
                "group.round_terminal", gid,
                {"group_id": gid, "round": int(group["round"]), "state": state,
                 "counts": view.counts, "result": f"fedhpc://groups/{gid}"},
                at=o.clock(), key=f"group.round_terminal:{gid}:{group['round']}",
            )  # fmt: skip
