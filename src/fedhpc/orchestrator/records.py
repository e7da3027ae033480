"""What the orchestrator stores per task and per attempt (JSON bodies in the store)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from fedhpc.domain.job import JobState, Shape
from fedhpc.ops.tasks import AttemptView, Provenance, SubmitTaskRequest

__all__ = ["ACTIVE", "AttemptRecord", "TaskRecord", "job_name", "new_id"]

# Attempt states the control cycle still watches.
ACTIVE = (JobState.SUBMITTED.value, JobState.PENDING.value, JobState.RUNNING.value)


def new_id(prefix: str) -> str:
    """Short ids keep job names short: fedhpc-t1a2b3c4d5e-1."""
    return prefix + uuid.uuid4().hex[:11]


def job_name(task_id: str, n: int) -> str:
    """The scheduler job name: a restarted daemon finds its jobs again by it."""
    return f"fedhpc-{task_id}-{n}"


class AttemptRecord(BaseModel):
    """One scheduler job. Written with job_id None *before* submitting (the intent)."""

    model_config = ConfigDict(extra="forbid")

    task_id: str
    n: int
    site: str
    partition: str
    account: str | None
    qos: str | None
    shape: Shape
    job_name: str
    job_id: str | None = None
    state: JobState = JobState.SUBMITTED
    native_state: str | None = None
    reason: str | None = None
    superseded: bool = False
    cancel_pending: bool = False  # cancel when the site answers again
    created_at: datetime
    pending_since: datetime | None = None
    submitted_at: datetime | None = None
    eligible_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    wait_s: float | None = None
    runtime_s: float | None = None
    exit_code: int | None = None
    estimate_s: float | None = None  # estimated completion when placed
    # The queue wait each estimator predicted when placed, and the one that decided: set
    # against the observed `wait_s` to judge the estimators (placement.errors).
    predicted_waits: dict[str, float] = Field(default_factory=dict)
    wait_source: str | None = None
    stdout: str | None = None
    stderr: str | None = None
    workdir: str | None = None

    def view(self) -> AttemptView:
        return AttemptView(
            n=self.n, site=self.site, partition=self.partition, account=self.account,
            qos=self.qos, shape=self.shape, job_name=self.job_name, job_id=self.job_id,
            state=self.state, reason=self.reason, superseded=self.superseded,
            submitted_at=self.submitted_at, eligible_at=self.eligible_at,
            started_at=self.started_at, ended_at=self.ended_at, wait_s=self.wait_s,
            runtime_s=self.runtime_s, exit_code=self.exit_code,
        )  # fmt: skip

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
    accepted_attempt: int | None = None
    attempts_made: int = 0
    spread_relaxed: bool = False
    avoid_sites: tuple[str, ...] = Field(default=(), description="soft: siblings' systems")
