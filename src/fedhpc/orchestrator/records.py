"""What the orchestrator stores per task and per attempt (JSON bodies in the store)."""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from fedhpc.domain.job import JobState, Shape
from fedhpc.ops.task_views import AttemptView, Provenance
from fedhpc.ops.tasks import SubmitTaskRequest
from fedhpc.transfer.records import stage_out_id

__all__ = [
    "AttemptRecord",
    "TaskRecord",
    "array_name",
    "is_own_job",
    "job_name",
    "new_id",
    "stage_out_ids",
]


def new_id(prefix: str) -> str:
    """Short ids keep job names short: fedhpc-t1a2b3c4d5e-1."""
    return prefix + uuid.uuid4().hex[:11]


def job_name(task_id: str, n: int) -> str:
    """The scheduler job name: a restarted daemon finds its jobs again by it."""
    return f"fedhpc-{task_id}-{n}"


# `job_name` of a single task (t<hex>) or of a group's child (t<hex>-<index>), then the attempt;
# `array_name` adds `-array` to its first member's.
_OWN_JOB = re.compile(r"fedhpc-t[0-9a-f]+(?:-[0-9]+)?-[0-9]+(?:-array)?")


def array_name(first_job_name: str) -> str:
    """The job name of an array whose first member's attempt is `first_job_name`: never any
    attempt's own name, so a lost array is never taken for a member submitted alone."""
    return f"{first_job_name}-array"


def is_own_job(name: str | None) -> bool:
    """Whether a scheduler job name is one `job_name` gives (a job fedhpc submitted)."""
    return name is not None and _OWN_JOB.fullmatch(name) is not None


class AttemptRecord(AttemptView):
    """One scheduler job. Written with job_id None *before* submitting (the intent). The fields
    an agent sees are `AttemptView`'s (the tool contract); the rest are the daemon's own."""

    model_config = ConfigDict(extra="forbid", frozen=False)

    task_id: str
    account: str | None
    shape: Shape
    job_name: str
    state: JobState = JobState.SUBMITTED
    native_state: str | None = None
    cancel_pending: bool = False  # cancel when the site answers again
    created_at: datetime
    pending_since: datetime | None = None
    estimate_s: float | None = None  # estimated completion when placed
    predicted_wait_s: float | None = None  # the queue wait its placement predicted
    # The queue wait each estimator predicted when placed, and the one that decided: set
    # against the observed `wait_s` to judge the estimators (placement.errors).
    predicted_waits: dict[str, float] = Field(default_factory=dict)
    wait_source: str | None = None
    stdout: str | None = None
    stderr: str | None = None
    workdir: str | None = None
    # Set when the attempt joined a job array (written before the array's one submission):
    # the array's job name, by which a restarted daemon finds it, and this attempt's index.
    array_name: str | None = None
    array_index: int | None = None
    # Hedged submission (orchestrator/hedging.py): a copy's first attempt number (the task's
    # attempt it hedges), and, for a copy another outran, the attempt that started first.
    copy_of: int | None = None
    outrun_by: int | None = None

    def view(self) -> AttemptView:
        """What the tool contract shows of this attempt."""
        return AttemptView.model_validate(self.model_dump(include=set(AttemptView.model_fields)))

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> AttemptRecord:
        return cls.model_validate(row["body"])


class TaskRecord(BaseModel):
    """A task: the request, its decisions, its budgets used, and its outcome."""

    model_config = ConfigDict(extra="forbid")

    id: str
    request: SubmitTaskRequest
    idempotency_key: str
    state: JobState = JobState.SUBMITTED
    created_at: datetime
    group_id: str | None = None
    provenance: Provenance | None = None
    decision: str = ""
    reasons: tuple[str, ...] = ()
    retries_used: int = 0
    extensions_used: int = 0
    replacements_used: int = 0
    reopened: int = Field(default=0, description="times replan placed it after it ended")
    excluded_sites: tuple[str, ...] = ()
    data_site: str | None = Field(
        default=None, description="where its stage-in copies its inputs: it runs only there"
    )
    waiting_since: datetime | None = Field(
        default=None, description="when its current wait for an offline site began"
    )
    refused_sites: tuple[str, ...] = Field(
        default=(), description="sites whose scheduler refused it, requeued to wait: not again"
    )
    accepted_attempt: int | None = None
    attempts_made: int = 0
    spread_relaxed: bool = False
    owner: str | None = Field(
        default=None, description="the person it runs for (service mode: issuer|sub)"
    )
    avoid_sites: tuple[str, ...] = Field(default=(), description="soft: siblings' systems")


def stage_out_ids(task: TaskRecord) -> tuple[str, ...]:
    """The ids of the transfers that copy the task's outputs (named at submission)."""
    return tuple(stage_out_id(task.id, i) for i in range(len(task.request.stage_out)))
