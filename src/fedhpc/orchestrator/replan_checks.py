"""What replan checks before it moves a task, as pure functions: whether the scheduler's
answer says a job has started (and the refusal that says so truthfully)."""

from __future__ import annotations

from collections.abc import Sequence

from fedhpc.domain.job import JobObservation, JobState
from fedhpc.errors import UsageError

__all__ = ["LEFT_QUEUE", "NOT_STARTED", "started_refusal", "what_scheduler_says"]

# A job the scheduler still holds without having started it: replan may supersede it.
# (UNSCHEDULABLE is a pending job whose reason says it never runs: not started either.)
NOT_STARTED = frozenset({JobState.SUBMITTED, JobState.PENDING, JobState.UNSCHEDULABLE})
LEFT_QUEUE = "left the queue"


def what_scheduler_says(job_id: str, seen: Sequence[JobObservation]) -> str | None:
    """None when the scheduler still lists `job_id` as not started; else what it says instead:
    a state (running, or an end such as completed) or LEFT_QUEUE when the job is missing from
    the answer. Slurm's status is `squeue`, which does not list a job that already ended: a
    short job that started and ended since the last probe is absent, not pending."""
    mine = [o for o in seen if o.job_id == job_id]
    if not mine:
        return LEFT_QUEUE
    for o in mine:  # an array: any element that started counts
        if o.state not in NOT_STARTED:
            return o.state.value
    return None


def started_refusal(task_id: str, site: str, job_id: str, said: str) -> UsageError:
    """The refusal of a replan whose job has started (or ended) since fedhpc's last probe:
    superseding it would run again work that ran, which replan promises never to do."""
    if said == JobState.RUNNING.value:
        return UsageError(f"task {task_id} is running", hint="Cancel it, then submit again.")
    if said == LEFT_QUEUE:
        what = (
            f"its job {job_id} has left {site}'s queue since fedhpc's last probe (it ran, or "
            "was cancelled or failed)"
        )
    else:
        what = f"its job {job_id} on {site} has already ended ({said}) since fedhpc's last probe"
    return UsageError(
        f"task {task_id} cannot be replanned: {what}",
        hint="The task is unchanged. fedhpc records how the job ended at its next control "
        f"cycle: read get_result({task_id}) then. For another run, submit a new task.",
    )
