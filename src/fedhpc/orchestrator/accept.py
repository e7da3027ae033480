"""Accepting a task: durably queued (or matched to the earlier task a retry repeats) and
answered at once; the placer places it, and the answer waits briefly for that placement."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

import anyio

from fedhpc.collector import Collector
from fedhpc.domain.job import JobState
from fedhpc.ops.task_views import TaskHandle
from fedhpc.ops.tasks import SubmitTaskRequest
from fedhpc.orchestrator import idem, staging
from fedhpc.orchestrator.book import TaskBook, handle
from fedhpc.orchestrator.door import check_envelope
from fedhpc.orchestrator.records import TaskRecord, new_id
from fedhpc.settings import PLACE_WAIT_S as PLACE_WAIT

__all__ = ["PLACE_WAIT_S", "WAITING_FOR_PROBES", "Acceptance", "Intake"]

# A submit answers once its task is durably queued; it waits this long at most for the first
# placement (default; FEDHPC_PLACE_WAIT_S), so that a single task's answer names its site.
PLACE_WAIT_S = float(PLACE_WAIT.default or 0)
WAITING_FOR_PROBES = "queued: waiting for the first probe of the sites (the daemon just started)"


@dataclass(frozen=True, slots=True)
class Acceptance:
    """What accepting a submission needs, a task's (`Intake`) or a group's (`Groups`): built
    once by the orchestrator service and shared by both."""

    book: TaskBook
    collector: Collector
    accepting: anyio.Lock  # a retry's lookup and the insert it races with
    clock: Callable[[], datetime]
    retry_window_s: float  # an unkeyed repeat within it is a retry (`idem`)
    place_wait_s: float  # a submit's answer waits this long at most for its placement
    notify: Callable[[], None]  # told after events may have landed
    wake_placer: Callable[[], None]
    wait_placed: Callable[[list[str], float], Awaitable[None]]


class Intake:
    """Accepts submit_task calls: one task row (with its continuation) per new request."""

    def __init__(self, deps: Acceptance) -> None:
        self.deps = deps
        self.book = deps.book

    async def submit_task(
        self, req: SubmitTaskRequest, *, wait_s: float | None = None, owner: str | None = None
    ) -> TaskHandle:
        """Accept the task durably (queued, or the earlier task a retry matches), wake the
        placer, and answer within `wait_s` (default the daemon's `place_wait_s`): with the
        placement if it came by then. `owner` (service mode) is written with the task's row,
        in the same transaction."""
        answer, fresh = await self.accept_task(req, owner=owner)
        if not fresh:
            return answer
        self.deps.wake_placer()
        wait_s = self.deps.place_wait_s if wait_s is None else wait_s
        if wait_s > 0:
            await self.deps.wait_placed([answer.task_id], wait_s)
        task = await self.book.load_task(answer.task_id)
        return handle(task, await self.book.latest_attempt(task.id))

    async def accept_task(
        self, req: SubmitTaskRequest, *, owner: str | None = None
    ) -> tuple[TaskHandle, bool]:
        """(the handle, True) for a new queued task; (the earlier task's handle, False) when
        this call is a retry of an earlier one (see `idem`)."""
        check_envelope(req.envelope, self.deps.collector.sites)  # placement's refusals, now
        dedupe = idem.dedupe_key(req)
        store = self.book.store
        async with self.deps.accepting:
            now = self.deps.clock()
            row = await store.task_by_key(req.idempotency_key) if req.idempotency_key else None
            by_key = row is not None
            if row is None and dedupe is not None:
                row = await store.task_by_dedupe(dedupe, idem.since(now, self.deps.retry_window_s))
            if row is not None:
                if row["owner"] != owner:  # another person's key: tell nothing of it
                    raise idem.IdempotencyConflict("this idempotency_key is already in use")
                return await self._existing(row, req, by_key=by_key, now=now), False
            ready = self.deps.collector.ready.is_set()
            task = TaskRecord(
                id=new_id("t"),
                request=req,
                state=JobState.QUEUED,
                created_at=now,
                idempotency_key=req.idempotency_key or f"auto:{new_id('k')}",
                decision="queued: placing" if ready else WAITING_FOR_PROBES,
                owner=owner,
            )
            if staging.declared(task):
                task.state = JobState.SUBMITTED  # staging.advance queues it when inputs arrive
                if await staging.prepare(self.book, self.deps.collector.sites, task):
                    task.state = JobState.QUEUED
            async with store.transaction() as tx:
                await tx.put_task(
                    task.id,
                    state=task.state.value,
                    body=task.model_dump(mode="json"),
                    at=now,
                    idempotency_key=task.idempotency_key,
                    dedupe=dedupe,
                    owner=owner,
                )
                if req.continuation is not None:
                    await self.book.put_continuation(tx, task.id, req.continuation)
        self.deps.notify()
        return handle(task, None), True

    async def _existing(
        self, row: dict[str, object], req: SubmitTaskRequest, *, by_key: bool, now: datetime
    ) -> TaskHandle:
        task = TaskRecord.model_validate(row["body"])
        if by_key and idem.request_digest(task.request) != idem.request_digest(req):
            raise idem.IdempotencyConflict(
                f"idempotency_key {req.idempotency_key!r} already names task {task.id}, "
                "submitted with other arguments"
            )
        answer = handle(task, await self.book.latest_attempt(task.id))
        note = idem.existing_note(
            "task",
            task.id,
            task.created_at,
            task.state.value,
            by_key=by_key,
            window_s=self.deps.retry_window_s,
            now=now,
        )
        update: dict[str, object] = {"existing": note}
        if task.state.terminal:
            update["next"] = (
                f"It already ended ({task.state.value}): its result is available now with "
                f'get_result(task_id="{task.id}"). No event will follow for it.'
            )
        return answer.model_copy(update=update)
