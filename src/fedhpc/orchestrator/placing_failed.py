"""Tasks whose placement raised: each ends alone with its reason and its agent is woken; the
other tasks of the batch go on."""

from __future__ import annotations

from datetime import datetime

import structlog

from fedhpc.domain.job import JobState
from fedhpc.errors import ErrorKind, typed_error
from fedhpc.orchestrator.book import TaskBook
from fedhpc.orchestrator.records import TaskRecord

__all__ = ["placing_failed"]

log = structlog.get_logger(__name__)


async def placing_failed(
    book: TaskBook, tasks: list[TaskRecord], exc: Exception, now: datetime
) -> None:
    """Tasks whose placement raised end alone, each with its reason, and their agents are
    woken: a request placement refuses (a typed validation error, e.g. a site the
    configuration no longer has) is unschedulable, anything else failed, its traceback
    logged once with the task ids."""
    if not tasks:
        return
    typed = typed_error(exc)
    refused = typed is not None and typed.kind is ErrorKind.VALIDATION
    ids = [t.id for t in tasks]
    if not refused:
        log.error("placement failed", task=ids[0], tasks=len(ids), exc_info=exc)
    async with book.store.transaction() as tx:
        for task in tasks:
            if refused:
                assert typed is not None
                task.state = JobState.UNSCHEDULABLE
                task.reasons = (f"cannot be placed: {typed.message}"[:1000],)
                task.decision = f"unschedulable: {task.reasons[0]}"
                kind = "task.unschedulable"
            else:
                what = typed.message if typed else f"{type(exc).__name__}: {exc}"
                task.state = JobState.FAILED
                task.reasons = (
                    f"internal error while placing it ({what[:300]}); nothing was "
                    "submitted. The daemon's log has the traceback; submitting it again "
                    "may work.",
                )
                task.decision = "failed: internal error while placing it"
                kind = "task.retry_exhausted"
            await book.save(tx, task, at=now)
            await book.emit(tx, kind, task, reason=task.reasons[0])
