"""What replan checks before it moves a task, as pure functions: exclusions the envelope's
include would outrank, whether the scheduler's answer says a job has started (and the
refusal that says so truthfully), and the refusal to give up a pending job for a wait."""

from __future__ import annotations

from collections.abc import Sequence

from fedhpc.domain.envelope import ResourceEnvelope
from fedhpc.domain.job import JobObservation, JobState
from fedhpc.errors import Conflict, FieldIssue, UsageError, ValidationFailed
from fedhpc.orchestrator.records import AttemptRecord, TaskRecord

__all__ = [
    "LEFT_QUEUE",
    "NOT_STARTED",
    "WouldWait",
    "check_exclusions",
    "started_refusal",
    "what_scheduler_says",
    "would_wait_refusal",
]

# A job the scheduler still holds without having started it: replan may supersede it.
# (UNSCHEDULABLE is a pending job whose reason says it never runs: not started either.)
NOT_STARTED = frozenset({JobState.SUBMITTED, JobState.PENDING, JobState.UNSCHEDULABLE})
LEFT_QUEUE = "left the queue"


def check_exclusions(task: TaskRecord, exclude: Sequence[str], envelope: ResourceEnvelope) -> None:
    """An excluded site that the envelope's sites_include names would be used anyway (an
    include outranks every exclusion in placement): refuse the contradiction, never place the
    task back where the caller said not to. Both this call's exclude_sites and the task's
    earlier exclusions (an earlier replan's, or its stage-in's) count."""
    both = [
        FieldIssue(f"exclude_sites[{i}]", f"{site} is in the envelope's sites_include")
        for i, site in enumerate(exclude)
        if site in envelope.sites_include
    ]
    if both:
        raise ValidationFailed(
            both,
            hint="Pass envelope with a sites_include that leaves these sites out (or none) "
            "together with exclude_sites; the task is unchanged.",
        )
    earlier = sorted(set(task.excluded_sites) & set(envelope.sites_include))
    if earlier:
        names = ", ".join(earlier)
        why = (
            "its stage-in: it runs where its inputs arrive"
            if task.request.stage_in
            else ("an earlier replan's exclude_sites")
        )
        raise UsageError(
            f"the envelope's sites_include names {names}, which task {task.id} already "
            f"excludes ({why}); an include would outrank that exclusion",
            hint=f"Pass an envelope whose sites_include leaves {names} out (or none): a "
            "task's exclusions stay for its life. The task is unchanged.",
        )


def what_scheduler_says(job_id: str, seen: Sequence[JobObservation]) -> str | None:
    """None when the scheduler still lists `job_id` as not started; else what it says instead:
    a state (running, or an end such as completed) or LEFT_QUEUE when the job is missing from
    the answer. Slurm's status is `squeue`, which does not list a job that already ended: a
    short job that started and ended since the last probe is absent, not pending."""
    mine = [o for o in seen if job_id in (o.job_id, o.key)]  # a job, or an array element
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


class WouldWait(Conflict):
    """A replan that only offline sites could run, of a task whose job waits at a scheduler."""

    code = "replan_would_wait"


def would_wait_refusal(
    task_id: str, live: Sequence[AttemptRecord], offline: Sequence[str]
) -> WouldWait:
    """The replanned task would fit only on `offline` sites, and `live` (a job pending, or
    about to be, at a scheduler) would have to be cancelled for a wait of unknown length: fedhpc
    keeps the job. The answer says so, and what the agent can do (it said "wait for the site"
    and "relax the envelope" at once, never this reason)."""
    jobs = ", ".join(
        f"job {a.job_id} at {a.site}" if a.job_id else f"job at {a.site}" for a in live
    )
    down = ", ".join(offline)
    verb = "is" if len(offline) == 1 else "are"
    return WouldWait(
        f"task {task_id} was not replanned: as asked, only {down} could run it, which {verb} "
        f"offline, and fedhpc does not give up its pending {jobs} to wait for an offline site",
        hint=f"The task is unchanged and its job stays pending. Replan again once {down} "
        f"answers (inspect_federation shows its health), or with an envelope an online site "
        f"can run; to wait for {down} instead, cancel the task and submit it again with that "
        "envelope (a new task waits for an offline site).",
    )
