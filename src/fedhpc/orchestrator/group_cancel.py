"""Cancel a whole group: every child still live ends cancelled, its job (if it has one at a
scheduler) killed with one cancel call per site for many jobs at once. A 5,000-child sweep is
stopped by one `cancel(<group id>)`, not by 5,000."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import structlog

from fedhpc.domain.job import TERMINAL, JobState
from fedhpc.ops.task_views import TaskHandle
from fedhpc.orchestrator.adapt import Adaptation
from fedhpc.orchestrator.book import TaskBook
from fedhpc.orchestrator.groups import group_state
from fedhpc.orchestrator.records import AttemptRecord, TaskRecord
from fedhpc.store import Store

__all__ = ["CHUNK", "cancel_group", "group_named"]

log = structlog.get_logger(__name__)

CHUNK = 200  # children loaded, cancelled and saved at a time: memory stays flat in the group's size
REASON = "cancelled on request (the whole group)"


async def group_named(store: Store, some_id: str) -> dict[str, Any] | None:
    """The group `some_id` names, if it names one and no task (ids do not clash: a task's
    starts with t, a group's with g)."""
    if await store.get_task(some_id) is not None:
        return None
    return await store.get_group(some_id)


async def cancel_group(
    book: TaskBook,
    adaptation: Adaptation,
    group_id: str,
    group: dict[str, Any],
    *,
    clock: Callable[[], datetime],
) -> tuple[TaskHandle, list[AttemptRecord]]:
    """Cancel every live child of `group` (the caller holds the orchestrator's lock, so no
    child is placed or submitted meanwhile); the answer comes with the attempts whose jobs
    the caller cancels after the lock (`Adaptation.cancels.send`). The group is closed as
    cancelled with the last chunk, with a `group.cancelled` event: it wakes nobody (the agent
    asked; no round event follows) but tells every stream following the group that it ended.
    A group whose children had all ended is left as it was, and the answer says nothing was
    cancelled."""
    store = book.store
    terminal = sorted(s.value for s in TERMINAL)
    counts = await store.group_counts(group_id)
    size = sum(counts.values())
    live = [
        str(c["id"])
        for c in await store.group_children(group_id, acting=terminal)
        if c["state"] not in terminal
    ]
    if not live:
        return _nothing_cancelled(group_id, counts, size), []
    jobs = queued = 0
    owed: list[AttemptRecord] = []
    for start in range(0, len(live), CHUNK):
        chunk: list[tuple[TaskRecord, list[AttemptRecord]]] = []
        for tid in live[start : start + CHUNK]:
            task = await book.load_task(tid)
            atts = [a for a in await book.load_attempts(tid) if not a.state.terminal]
            chunk.append((task, atts))
        for _, atts in chunk:
            for a in atts:
                adaptation.cancels.owe(a)
                owed.append(a)
        async with store.transaction() as tx:
            for task, atts in chunk:
                jobs += any(a.job_id is not None for a in atts)
                queued += not atts
                for a in atts:
                    a.superseded = True
                task.state, task.reasons = JobState.CANCELLED, (REASON,)
                await book.save(tx, task, *atts, at=clock())
            if start + CHUNK >= len(live):
                await tx.put_group(
                    group_id,
                    state=JobState.CANCELLED.value,
                    round_=int(group["round"]),
                    body=group["body"],
                    at=clock(),
                )
                await tx.append_event(
                    "group.cancelled",
                    group_id,
                    {"group_id": group_id, "state": JobState.CANCELLED.value, "reason": REASON},
                    at=clock(),
                    key=f"group.cancelled:{group_id}:{group['round']}",
                )
    ended = size - len(live)
    log.info("group cancelled", group=group_id, children=len(live), jobs=jobs, ended=ended)
    others = len(live) - jobs - queued
    said = [f"{jobs} with a job at a scheduler"] if jobs else []
    said += [f"{queued} still queued in fedhpc"] if queued else []
    said += [f"{others} being submitted"] if others else []
    decision = f"group {group_id}: cancelled {len(live)} of {size} children ({', '.join(said)})" + (
        f"; {ended} had already ended and keep their results" if ended else ""
    )
    answer = TaskHandle(
        task_id=group_id,
        state=JobState.CANCELLED,
        decision=decision,
        next=(
            f"Cancelled: fedhpc stopped the group's {len(live)} live children and their jobs; "
            "nothing more will happen and nothing will wake you for it. Its counts: read "
            f"resource fedhpc://groups/{group_id}."
        ),
    )
    return answer, owed


def _nothing_cancelled(group_id: str, counts: dict[str, int], size: int) -> TaskHandle:
    state = JobState(group_state([s for s, n in counts.items() if n]))  # all ended: one of three
    told = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()) if n)
    return TaskHandle(
        task_id=group_id,
        state=state,
        decision=f"group {group_id}: all {size} children had already ended ({told})",
        next=(
            "Nothing was cancelled: every child had already ended. Read them with "
            f"resource fedhpc://groups/{group_id} or get_result(task_id) for each child."
        ),
    )
