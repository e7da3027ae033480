"""A concrete shape, a job spec, job states with their transition table, and observations."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from fedhpc.domain.site import SafeName
from fedhpc.domain.units import MiB, Seconds, UtcDatetime

__all__ = [
    "ACTIVE",
    "TERMINAL",
    "TRANSITIONS",
    "AccountingRecord",
    "ArraySpec",
    "JobObservation",
    "JobSpec",
    "JobState",
    "Shape",
    "aggregate_state",
    "can_transition",
    "merge_state",
]


class JobState(StrEnum):
    """Lifecycle of one scheduler job (one attempt), as fedhpc sees it. A task uses the same
    states, plus QUEUED before any scheduler has it."""

    QUEUED = "queued"  # a task accepted by fedhpc, not yet handed to a scheduler (placing, waiting)
    SUBMITTED = "submitted"  # we handed it to the scheduler; no observation yet
    PENDING = "pending"  # queued, waiting for resources or dependencies
    RUNNING = "running"  # started (includes completing / staging)
    COMPLETED = "completed"  # ended with exit code 0
    FAILED = "failed"  # ended non-zero, node failure, out of memory, boot failure
    CANCELLED = "cancelled"  # cancelled by the user, an admin or fedhpc
    TIMEOUT = "timeout"  # hit its wall-time limit
    UNSCHEDULABLE = "unschedulable"  # the scheduler can never run it as asked

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL: frozenset[JobState] = frozenset(
    {
        JobState.COMPLETED,
        JobState.FAILED,
        JobState.CANCELLED,
        JobState.TIMEOUT,
        JobState.UNSCHEDULABLE,
    }
)
# States of a job a scheduler has and the control cycle still watches (not QUEUED: no scheduler
# has that task yet; not TERMINAL: it has ended).
ACTIVE: frozenset[JobState] = frozenset({JobState.SUBMITTED, JobState.PENDING, JobState.RUNNING})

_ENDS = TERMINAL
# Allowed moves. A job may jump straight to any terminal state (a short job can finish between
# two polls); it never leaves a terminal state, and never goes back from running to pending
# except by requeue, which Slurm reports as PENDING with reason "BeginTime"/"Requeued" and we
# treat as a new observation of the same attempt only when the scheduler says so explicitly.
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.QUEUED: frozenset({JobState.SUBMITTED, JobState.PENDING, JobState.RUNNING}) | _ENDS,
    JobState.SUBMITTED: frozenset({JobState.PENDING, JobState.RUNNING}) | _ENDS,
    JobState.PENDING: frozenset({JobState.RUNNING}) | _ENDS,
    JobState.RUNNING: _ENDS,
    **{s: frozenset() for s in TERMINAL},
}

# Order used to merge observations monotonically.
_RANK = {
    JobState.QUEUED: -1,
    JobState.SUBMITTED: 0,
    JobState.PENDING: 1,
    JobState.RUNNING: 2,
    **dict.fromkeys(TERMINAL, 3),
}


def can_transition(current: JobState, new: JobState) -> bool:
    return new == current or new in TRANSITIONS[current]


def merge_state(current: JobState, observed: JobState) -> JobState:
    """Merge an observation monotonically: stale or backward observations never undo progress."""
    if current.terminal:
        return current
    if _RANK[observed] < _RANK[current]:
        return current
    return observed if can_transition(current, observed) else current


def aggregate_state(states: list[JobState]) -> JobState:
    """One state for an array job from all of its elements (never just the first row)."""
    if not states:
        raise ValueError("no states to aggregate")
    if all(s.terminal for s in states):
        for bad in (JobState.FAILED, JobState.TIMEOUT, JobState.CANCELLED, JobState.UNSCHEDULABLE):
            if bad in states:
                return bad
        return JobState.COMPLETED
    if any(s is JobState.RUNNING for s in states) or any(s.terminal for s in states):
        return JobState.RUNNING
    if any(s is JobState.PENDING for s in states):
        return JobState.PENDING
    return JobState.SUBMITTED


class Shape(BaseModel):
    """A concrete, granted request: what the batch script asks for (per node where it says so)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    nodes: int = Field(default=1, ge=1)
    cpus: int = Field(default=1, ge=1, description="CPUs per node")
    gpus: int = Field(default=0, ge=0, description="GPUs per node")
    memory_mib: MiB = Field(default=0, ge=0, description="per node; 0 = site default")
    wall_time_s: Seconds = Field(default=600, ge=1)
    accelerator_type: SafeName | None = None


# Job names reach a directive line: keep them to a conservative charset.
_JOB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# Paths reach a directive line too. Allowed: what real paths use, plus Slurm's %j/%A/%a/%x tokens.
_PATH = re.compile(r"^[A-Za-z0-9_./%~+@=,:-]{1,1024}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def _job_name(v: str) -> str:
    if not _JOB_NAME.match(v):
        raise ValueError("job names use letters, digits, '_', '.', '-' (at most 64, no spaces)")
    return v


def _path(v: str) -> str:
    if not _PATH.match(v) or ".." in v.split("/") or v.startswith("-"):
        raise ValueError(
            "paths use letters, digits and _ . / % ~ + @ = , : - only (no spaces, quotes, "
            "'$', newlines, '..' or a leading '-')"
        )
    return v


def _env_name(v: str) -> str:
    if not _ENV_NAME.match(v):
        raise ValueError(f"{v!r} is not a valid environment variable name")
    return v


def _env_value(v: str) -> str:
    if "\x00" in v:
        raise ValueError("environment values cannot contain NUL")
    return v


_COMMENT = re.compile(r"^fedhpc-for:[A-Za-z0-9_./@:|+=,-]{1,200}$")
_NOT_IN_COMMENT = re.compile(r"[^A-Za-z0-9_./@:|+=,-]")
# A job carries the person it runs for (service mode) in the scheduler's comment where it has
# one (Slurm: squeue %k, sacct Comment), and in its environment (settings.JOB_FOR).


def _comment(v: str) -> str:
    if not _COMMENT.match(v):
        raise ValueError(f"{v!r} is not a job comment fedhpc writes")
    return v


def job_comment(owner: str) -> str:
    """The comment naming the person a job runs for: `fedhpc-for:<issuer|sub>`, any character
    a scheduler directive may not carry replaced by `_`, at most 200 of them."""
    return "fedhpc-for:" + _NOT_IN_COMMENT.sub("_", owner)[:200]


JobName = Annotated[str, AfterValidator(_job_name)]
JobComment = Annotated[str, AfterValidator(_comment)]
SafePath = Annotated[str, AfterValidator(_path)]
EnvName = Annotated[str, AfterValidator(_env_name)]
EnvValue = Annotated[str, AfterValidator(_env_value)]


class ArraySpec(BaseModel):
    """A job array: indices start..stop (inclusive) by step, at most `limit` running at once."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    start: int = Field(default=0, ge=0)
    stop: int = Field(ge=0)
    step: int = Field(default=1, ge=1)
    limit: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.stop < self.start:
            raise ValueError("array.stop is below array.start")
        return self

    @property
    def size(self) -> int:
        return (self.stop - self.start) // self.step + 1


class JobSpec(BaseModel):
    """Everything a dialect needs to render one batch job for one site partition."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: JobName
    command: tuple[str, ...] = Field(
        min_length=1, description="argv of the task; each element is quoted, never re-parsed"
    )
    partition: SafeName
    shape: Shape
    account: SafeName | None = None
    qos: SafeName | None = None
    workdir: SafePath | None = None
    stdout: SafePath | None = None
    stderr: SafePath | None = None
    env: dict[EnvName, EnvValue] = Field(default_factory=dict)
    container_image: str | None = Field(default=None, max_length=512)
    array: ArraySpec | None = None
    comment: JobComment | None = Field(
        default=None, description="the person the job runs for (service mode), `job_comment`"
    )

    @model_validator(mode="after")
    def _no_nul(self) -> Self:
        for i, arg in enumerate(self.command):
            if "\x00" in arg:
                raise ValueError(f"command[{i}] contains NUL")
        if self.container_image is not None and "\x00" in self.container_image:
            raise ValueError("container_image contains NUL")
        return self


class JobObservation(BaseModel):
    """One row of scheduler status (squeue/qstat/bjobs), one per array element."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    job_id: str = Field(description="scheduler id of the job (the array's parent for elements)")
    array_index: str | None = Field(default=None, description="element index, or a pending range")
    element_id: str | None = Field(
        default=None, description="the element's own id where it is not <job_id>_<index> (PBS)"
    )
    state: JobState
    native_state: str
    reason: str | None = None
    name: str | None = None
    partition: str | None = None
    nodes: str | None = None
    exit_code: int | None = None

    @property
    def key(self) -> str:
        """The job's id, or its element's: what `ArrayDialect.element_id` gave the element
        (Slurm `A_i`; PBS `123[4].server`, carried in `element_id`)."""
        if self.element_id is not None:
            return self.element_id
        return self.job_id if self.array_index is None else f"{self.job_id}_{self.array_index}"


class AccountingRecord(BaseModel):
    """One job (or array element) from scheduler accounting: the times decide wait and runtime."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    job_id: str
    array_index: str | None = None
    element_id: str | None = None  # as JobObservation's
    name: str | None = None
    account: str | None = None
    partition: str | None = None
    state: JobState
    native_state: str
    # Dialects parse times in the site's zone; a naive one here is taken as UTC (units.as_utc).
    submit: UtcDatetime | None = None
    eligible: UtcDatetime | None = None
    start: UtcDatetime | None = None
    end: UtcDatetime | None = None
    elapsed_s: int | None = None
    exit_code: int | None = None
    alloc_tres: dict[str, str] = Field(default_factory=dict)

    @property
    def key(self) -> str:
        """The job's id, or its array element's (`JobObservation.key`)."""
        if self.element_id is not None:
            return self.element_id
        return self.job_id if self.array_index is None else f"{self.job_id}_{self.array_index}"

    @property
    def settled(self) -> bool:
        """Terminal and complete. Accounting is eventually consistent: slurmdbd may first hold
        a terminal row without partition, name or eligible time (seen on Slurm 22.05)."""
        return (
            self.state.terminal
            and self.partition is not None
            and self.submit is not None
            and self.end is not None
        )

    @property
    def final(self) -> bool:
        """Terminal with an end time: the outcome is known, though slurmdbd may still fill in
        the partition, eligible time and job name a second or two later (`settled`). The state,
        start, end and exit code of such a row are already the scheduler's last word."""
        return self.state.terminal and self.end is not None

    @property
    def wait_s(self) -> float | None:
        base = self.eligible or self.submit
        if base is None or self.start is None:
            return None
        return max(0.0, (self.start - base).total_seconds())

    @property
    def runtime_s(self) -> float | None:
        if self.start is None or self.end is None:
            return None
        return max(0.0, (self.end - self.start).total_seconds())
