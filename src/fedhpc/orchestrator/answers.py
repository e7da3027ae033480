"""The `next` line of each answer, decided with what the daemon knows: whether a continuation
will wake the agent (one registered on the task or its group, whose runtime the daemon can
start now) and the outcome."""

from __future__ import annotations

from collections.abc import Callable

from fedhpc.domain.job import JobState
from fedhpc.ops.continuations import DEFAULT_WAKE_EVENTS
from fedhpc.ops.hints import HintTool, next_hint
from fedhpc.ops.task_views import GroupView, ResultManifest, TaskHandle
from fedhpc.orchestrator.book import TaskBook
from fedhpc.orchestrator.offline_wait import move_hint, waits_for
from fedhpc.orchestrator.records import TaskRecord

__all__ = ["Answers"]


def _waiting(task: TaskRecord) -> tuple[str, str]:
    """`next_hint`'s `waiting` and `move` for a queued task that waits for offline sites
    ("" for any other)."""
    sites = waits_for(task) if task.state is JobState.QUEUED else []
    return (", ".join(sites), move_hint(task)) if sites else ("", "")


class Answers:
    """`blocker(runtime)`: why the daemon cannot start that runtime's resumes now ("" = it
    can), so that no answer says "end your turn" when nothing will wake the agent."""

    def __init__(self, book: TaskBook, blocker: Callable[[str], str]) -> None:
        self.book = book
        self.blocker = blocker

    async def resumes(self, *subjects: str | None) -> tuple[bool, str]:
        """Whether a continuation registered for one of `subjects` (a task, its group, a
        transfer) will wake the agent, and, when one exists but none can start now, why (with
        the fix)."""
        found = await self.book.store.continuations_for([s for s in subjects if s])
        blocked = [self.blocker(str(c["runtime"])) for c in found]
        if not found or not all(blocked):
            return bool(found), ""
        return False, blocked[0]

    async def told(self, task: TaskRecord) -> bool:
        """Whether a continuation will hear that `task` waits for a site: a single task's own
        (`task.waiting_for_site`), a child's group's (`group.waiting_for_site`), whose events
        list it (one registered before the event existed does not) and can start now."""
        kind, subject = (
            ("task.waiting_for_site", task.id)
            if task.group_id is None
            else ("group.waiting_for_site", task.group_id)
        )
        found = await self.book.store.continuations_for([subject])
        return any(
            kind in c["body"].get("events", DEFAULT_WAKE_EVENTS)
            and not self.blocker(str(c["runtime"]))
            for c in found
        )

    async def hinted(self, handle: TaskHandle, tool: HintTool) -> TaskHandle:
        """`handle` with its `next` line (one it already has is kept: cancel decides its own)."""
        if handle.next:
            return handle
        task = await self.book.load_task(handle.task_id)
        wake, blocked = await self.resumes(task.id, task.group_id)
        waiting, move = _waiting(task)
        hint = next_hint(
            tool,
            handle.state.value,
            resumes=wake,
            ref=handle.task_id,
            child=task.group_id is not None,
            blocked=blocked,
            waiting=waiting,
            move=move,
            told=bool(waiting) and await self.told(task),
        )
        return handle.model_copy(update={"next": hint})

    async def hinted_group(self, view: GroupView, tool: HintTool) -> GroupView:
        wake, blocked = await self.resumes(view.group_id)
        hint = next_hint(tool, view.state, resumes=wake, blocked=blocked)
        return view.model_copy(update={"next": hint})

    async def hinted_result(self, manifest: ResultManifest) -> ResultManifest:
        if manifest.next:  # get_result's own: why an ended task's output cannot be read now
            return manifest
        wake, blocked = await self.resumes(manifest.task_id, manifest.group_id)
        task = await self.book.load_task(manifest.task_id)
        waiting, move = _waiting(task)
        hint = next_hint(
            "get_result",
            manifest.state.value,
            resumes=wake,
            ref=manifest.task_id,
            whole=not manifest.outputs,
            child=manifest.group_id is not None,
            blocked=blocked,
            offline=manifest.unreadable or "",
            waiting=waiting,
            move=move,
            told=bool(waiting) and await self.told(task),
        )
        return manifest.model_copy(update={"next": hint})
