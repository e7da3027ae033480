"""Ends a leader killed half-way left: a task whose last attempt ended (or whose hedged copy
completed) while the task's own end was never written, taken through its end at start-up."""

from __future__ import annotations

import structlog

from fedhpc.domain.job import JobState
from fedhpc.logs import isolated
from fedhpc.orchestrator.adapt import ACTIVE_STATES, Adaptation
from fedhpc.orchestrator.book import TaskBook

__all__ = ["finish_ends"]

log = structlog.get_logger(__name__)


async def finish_ends(book: TaskBook, adaptation: Adaptation) -> int:
    """Under the lock, once this process leads: a task whose last attempt ended while the
    task's own end was never written (the leader killed between the two writes) would
    wait forever, since only live attempts are observed. Each is taken through its end
    now (accepted, retried or failed, as if just observed); the count of them."""
    done = 0
    for task_id in await book.store.tasks_left_open(ACTIVE_STATES):
        with isolated("finishing a task's end failed", task=task_id):
            task = await book.load_task(task_id)
            atts = await book.load_attempts(task_id)
            # The newest attempt in play (a hedged copy another outran is not its end).
            last = max((a for a in atts if not a.superseded), key=lambda a: a.n, default=None)
            if last is None or not last.state.terminal:
                continue  # never dispatched, or every attempt set aside: not an end
            log.warning("finishing the end of a task its attempt left", task=task_id)
            await adaptation.after_end(task, last)
            done += 1
    for task_id in await book.store.tasks_completed_open(ACTIVE_STATES):
        with isolated("finishing a task's end failed", task=task_id):
            task = await book.load_task(task_id)
            ended = [
                a
                for a in await book.load_attempts(task_id)
                if a.state is JobState.COMPLETED and a.outrun_by is None
            ]
            if task.state.terminal or not ended:
                continue
            log.warning("finishing a hedged copy's completed end", task=task_id)
            await adaptation.after_end(task, ended[0])  # its result; others cancelled
            done += 1
    return done
