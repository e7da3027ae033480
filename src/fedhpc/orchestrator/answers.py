"""The `next` line of each answer, decided with what the daemon knows: whether a continuation
will wake the agent (one registered on the task or its group, whose runtime the daemon can
start now) and the outcome."""

from __future__ import annotations

from fedhpc.ops.hints import HintTool, next_hint
from fedhpc.ops.tasks import GroupView, ResultManifest, TaskHandle
from fedhpc.orchestrator.service import Orchestrator

__all__ = ["hinted", "hinted_group", "hinted_result", "resumes"]


async def resumes(o: Orchestrator, *subjects: str | None) -> tuple[bool, str]:
    """Whether a continuation registered for one of `subjects` (a task, its group, a transfer)
    will wake the agent, and, when one exists but none can start now, why (with the fix)."""
    found = await o.store.continuations_for([s for s in subjects if s])
    blocked = [o.resume_blocker(str(c["runtime"])) for c in found]
    if not found or not all(blocked):
        return bool(found), ""
    return False, blocked[0]


async def hinted(o: Orchestrator, handle: TaskHandle, tool: HintTool) -> TaskHandle:
    """`handle` with its `next` line (one it already has is kept: cancel decides its own)."""
    if handle.next:
        return handle
    task = await o.load_task(handle.task_id)
    wake, blocked = await resumes(o, task.id, task.group_id)
    hint = next_hint(tool, handle.state.value, resumes=wake, ref=handle.task_id,
                     child=task.group_id is not None, blocked=blocked)  # fmt: skip
    return handle.model_copy(update={"next": hint})


async def hinted_group(o: Orchestrator, view: GroupView, tool: HintTool) -> GroupView:
    wake, blocked = await resumes(o, view.group_id)
    hint = next_hint(tool, view.state, resumes=wake, blocked=blocked)
    return view.model_copy(update={"next": hint})


async def hinted_result(o: Orchestrator, manifest: ResultManifest) -> ResultManifest:
    wake, blocked = await resumes(o, manifest.task_id, manifest.group_id)
    hint = next_hint("get_result", manifest.state.value, resumes=wake, ref=manifest.task_id,
                     whole=not manifest.outputs, child=manifest.group_id is not None,
                     blocked=blocked)  # fmt: skip
    return manifest.model_copy(update={"next": hint})
