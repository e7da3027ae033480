"""The task book: tasks and attempts read from and written to the store, the events that
report them, and the continuations that wake an agent for them."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from pydantic import ValidationError

from fedhpc.domain.job import JobState
from fedhpc.errors import ErrorKind, PermanentError, UsageError
from fedhpc.ops.continuations import ContinuationSpec
from fedhpc.ops.task_views import TaskHandle
from fedhpc.orchestrator.records import AttemptRecord, TaskRecord, stage_out_ids
from fedhpc.store import Store, Tx
from fedhpc.store.continuations import put_continuation

__all__ = ["TaskBook", "TaskNotFound", "TaskUnreadable", "handle"]


class TaskNotFound(UsageError):
    code = "not_found"
    kind = ErrorKind.NOT_FOUND
    default_hint = "List tasks with `fedhpc tasks` (or the list_events tool)."


class TaskUnreadable(PermanentError):
    """A stored task that no longer reads as one (written by another version, or edited)."""

    code = "task_unreadable"
    default_hint = (
        "Its record cannot be shown; `fedhpc tasks --state failed` lists it. Submit the work "
        "again as a new task."
    )


class TaskBook:
    """Tasks, attempts, events and continuations in `store`, stamped by `clock`."""

    def __init__(self, store: Store, clock: Callable[[], datetime]) -> None:
        self.store = store
        self.clock = clock

    async def load_task(self, task_id: str) -> TaskRecord:
        row = await self.store.get_task(task_id)
        if row is None:
            raise TaskNotFound(f"no task {task_id!r}")
        try:
            return TaskRecord.model_validate(row["body"])
        except ValidationError as exc:
            raise TaskUnreadable(
                f"task {task_id!r} is stored in a form this version cannot read "
                f"({exc.error_count()} fields); it is {row['state']}"
            ) from None

    async def load_attempts(self, task_id: str) -> list[AttemptRecord]:
        return [AttemptRecord.from_row(r) for r in await self.store.attempts(task_id)]

    @staticmethod
    async def save(tx: Tx, task: TaskRecord, *attempts: AttemptRecord, at: datetime) -> None:
        await tx.put_task(
            task.id,
            state=task.state.value,
            body=task.model_dump(mode="json"),
            at=at,
            idempotency_key=task.idempotency_key,
            group_id=task.group_id,
        )
        await TaskBook.save_attempts(tx, *attempts, at=at)

    @staticmethod
    async def save_attempts(tx: Tx, *attempts: AttemptRecord, at: datetime) -> None:
        """The attempts alone (their task unchanged: never a stale copy of it)."""
        for a in attempts:
            await tx.put_attempt(
                a.task_id,
                a.n,
                site=a.site,
                partition=a.partition,
                job_name=a.job_name,
                job_id=a.job_id,
                state=a.state.value,
                body=a.model_dump(mode="json"),
                at=at,
            )

    async def emit(
        self, tx: Tx, kind: str, task: TaskRecord, *, key: str | None = None, **payload: object
    ) -> None:
        """One event per registered fact, keyed so it can never be written twice (per task,
        or per `key` for a fact that can recur, such as one attempt's lost site)."""
        body: dict[str, object] = {
            "task_id": task.id,
            "state": task.state.value,
            "result": f"fedhpc://tasks/{task.id}",
        }
        if task.group_id:
            body["group_id"] = task.group_id
        if task.owner:  # service mode: the person it ran for, in the event log too
            body["for"] = task.owner
        body.update({k: v for k, v in payload.items() if v is not None})
        # A task replan reopened reports its new outcome as a new fact, not a duplicate.
        base = f"{kind}:{task.id}" + (f":reopened{task.reopened}" if task.reopened else "")
        await tx.append_event(
            kind, task.id, body, at=self.clock(), key=base + (f":{key}" if key else "")
        )

    async def register(self, subject: str, spec: ContinuationSpec) -> str:
        """Attach a continuation to a task or group (idempotent per subject and spec)."""
        async with self.store.transaction() as tx:
            return await self.put_continuation(tx, subject, spec)

    async def put_continuation(self, tx: Tx, subject: str, spec: ContinuationSpec) -> str:
        """The continuation row, in the caller's transaction (with the task it wakes for)."""
        return await put_continuation(tx, subject, spec, at=self.clock())

    async def latest_attempt(self, task_id: str) -> AttemptRecord | None:
        """The task's newest attempt still in play (None before any); while hedged copies are
        in play, the one that started, else the first (the others are named in the
        decision)."""
        atts = [a for a in await self.load_attempts(task_id) if not a.superseded]
        live = [a for a in atts if not a.state.terminal]
        if len(live) > 1:
            return next((a for a in live if a.state is JobState.RUNNING), live[0])
        return atts[-1] if atts else None


def handle(task: TaskRecord, att: AttemptRecord | None) -> TaskHandle:
    """The answer of submit_task, replan and cancel: the task and its current attempt."""
    return TaskHandle(
        task_id=task.id,
        state=task.state,
        site=att.site if att else None,
        partition=att.partition if att else None,
        account=att.account if att else None,
        shape=att.shape if att else None,
        job_id=att.job_id if att else None,
        attempt=att.n if att else 0,
        decision=task.decision,
        reasons=task.reasons,
        transfers=stage_out_ids(task),
    )
