"""The task contract: submit_task, submit_group, get_result, replan, cancel, and their answers."""

from __future__ import annotations

from datetime import datetime
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fedhpc.domain.envelope import ResourceEnvelope
from fedhpc.domain.job import EnvName, EnvValue, JobState, SafePath, Shape
from fedhpc.domain.units import MAX_CREDITS, MAX_GROUP_CHILDREN, MAX_SECONDS
from fedhpc.ops.continuations import ContinuationSpec
from fedhpc.ops.data import StageOut, TransferProvenance
from fedhpc.placement.settings import PolicyKind

__all__ = [
    "AdaptationPolicy",
    "AttemptView",
    "CancelRequest",
    "GroupChild",
    "GroupView",
    "OutputRef",
    "Provenance",
    "ReplanRequest",
    "ResultManifest",
    "ResultRequest",
    "SubmitGroupRequest",
    "SubmitTaskRequest",
    "TaskHandle",
    "TaskSummary",
]

_NEXT = (
    "Submitted. End your turn now: fedhpc watches the job and resumes you with the result or "
    "an exception that needs a decision. Do not poll."
)


class _In(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)


class AdaptationPolicy(_In):
    """What fedhpc may do on its own, each with a budget; beyond it, the agent decides."""

    max_retries: int = Field(default=1, ge=0, le=10, description="resubmissions of failed work")
    max_wall_extensions: int = Field(
        default=1, ge=0, le=5, description="after a timeout, resubmit with longer wall time"
    )
    wall_factor: float = Field(default=2.0, gt=1, le=10, description="wall-time growth per try")
    replace_pending: bool = Field(
        default=True, description="move a pending attempt when another site is clearly better"
    )
    replace_after_s: float = Field(
        default=120.0, ge=0, le=MAX_SECONDS, description="pending this long first"
    )
    replace_margin_s: float = Field(
        default=60.0,
        ge=0,
        le=MAX_SECONDS,
        description="the new placement must finish this much sooner",
    )
    max_replacements: int = Field(default=2, ge=0, le=10)


class SubmitTaskRequest(_In):
    """One job: what to run, within which bounds, and how much autonomy fedhpc has."""

    command: tuple[str, ...] = Field(
        min_length=1, max_length=1024, description="argv; every element is passed verbatim"
    )
    envelope: ResourceEnvelope = Field(description="min/max resources and constraints")
    name: str | None = Field(
        default=None,
        max_length=64,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        description="a label for people; the job name is fedhpc-<task>-<attempt>",
    )
    policy: PolicyKind = Field(default=PolicyKind.BEST_FEASIBLE)
    fixed_site: str | None = Field(default=None, description="with policy fixed-site")
    workdir: SafePath | None = Field(default=None, description="default: a per-task folder")
    env: dict[EnvName, EnvValue] = Field(default_factory=dict)
    container_image: str | None = Field(default=None, max_length=512)
    outputs: tuple[SafePath, ...] = Field(
        default=(), max_length=64, description="artifacts the task writes, relative to workdir"
    )
    task_budget: float | None = Field(
        default=None, ge=0, le=MAX_CREDITS, description="credits for this task"
    )
    adaptation: AdaptationPolicy = Field(default_factory=AdaptationPolicy)
    continuation: ContinuationSpec | None = Field(
        default=None, description="wake this agent session on the task's result or exception"
    )
    stage_in: tuple[str, ...] = Field(
        default=(), max_length=64, description="transfer ids to wait for; runs where they land"
    )
    stage_out: tuple[StageOut, ...] = Field(
        default=(), max_length=64, description="outputs to copy elsewhere once the task completes"
    )
    idempotency_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="retrying with the same key never submits twice (default: from the request)",
    )

    @model_validator(mode="after")
    def _fixed(self) -> Self:
        if self.policy is PolicyKind.FIXED_SITE and not self.fixed_site:
            raise ValueError("policy fixed-site needs fixed_site")
        for i, arg in enumerate(self.command):
            if "\x00" in arg:
                raise ValueError(f"command[{i}] contains NUL")
        return self


class TaskHandle(_Out):
    """The immediate answer of submit_task, replan and cancel."""

    task_id: str
    state: JobState
    site: str | None = None
    partition: str | None = None
    account: str | None = None
    shape: Shape | None = None
    job_id: str | None = None
    attempt: int = 0
    decision: str = Field(default="", description="why this placement, in one line")
    reasons: tuple[str, ...] = Field(default=(), description="why it cannot run, if it cannot")
    transfers: tuple[str, ...] = Field(default=(), description="stage-out transfer ids")
    next: str = _NEXT


class AttemptView(_Out):
    """One scheduler job of a task."""

    n: int
    site: str
    partition: str
    account: str | None
    qos: str | None
    shape: Shape
    job_name: str
    job_id: str | None
    state: JobState
    reason: str | None = None
    superseded: bool = False
    submitted_at: datetime | None = None
    eligible_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    wait_s: float | None = None
    runtime_s: float | None = None
    exit_code: int | None = None


class OutputRef(_Out):
    """A file a task produced, by reference: never its content unless asked, and bounded."""

    kind: Literal["stdout", "stderr", "artifact"]
    site: str
    path: str
    bytes: int | None = None


class Provenance(_Out):
    """Where the envelope came from and why the placement was chosen."""

    envelope_source: str
    rationale: str = ""
    confidence: float | None = None
    policy: str
    decision: str
    candidates: int
    feasible: int


class ResultRequest(_In):
    """get_result: a task's manifest, optionally with a bounded preview of one output."""

    task_id: str = Field(min_length=1, max_length=64)
    preview: Literal["stdout", "stderr"] | None = None
    max_bytes: int = Field(default=4096, ge=1, le=65536)


class ResultManifest(_Out):
    """The compact answer of get_result."""

    task_id: str
    name: str | None
    state: JobState
    group_id: str | None = None
    created_at: datetime
    attempts: tuple[AttemptView, ...]
    provenance: Provenance | None
    outputs: tuple[OutputRef, ...]
    preview: str | None = None
    truncated: bool = False
    reasons: tuple[str, ...] = ()
    data: tuple[TransferProvenance, ...] = Field(default=(), description="stage-in/out transfers")


class TaskSummary(_Out):
    """One line of `fedhpc tasks`."""

    task_id: str
    name: str | None
    state: JobState
    site: str | None
    partition: str | None
    job_id: str | None
    attempts: int
    group_id: str | None
    updated_at: datetime


class CancelRequest(_In):
    task_id: str = Field(min_length=1, max_length=64)


class ReplanRequest(_In):
    """Re-place a task that has not started: exclude sites and/or change its envelope."""

    task_id: str = Field(min_length=1, max_length=64)
    exclude_sites: tuple[str, ...] = ()
    envelope: ResourceEnvelope | None = None


class GroupChild(_In):
    """One child of a group: its own command and label; it shares the group's envelope."""

    command: tuple[str, ...] = Field(min_length=1, max_length=1024)
    name: str | None = Field(default=None, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    required: bool = Field(default=True, description="the round waits for it")


class SubmitGroupRequest(_In):
    """Related children under one objective, envelope, round and policy."""

    objective: str = Field(min_length=1, max_length=2000)
    children: tuple[GroupChild, ...] = Field(min_length=1, max_length=MAX_GROUP_CHILDREN)
    envelope: ResourceEnvelope
    policy: PolicyKind = PolicyKind.BEST_FEASIBLE
    spread: bool = Field(default=True, description="prefer distinct systems (soft)")
    workdir: SafePath | None = None
    env: dict[EnvName, EnvValue] = Field(default_factory=dict)
    adaptation: AdaptationPolicy = Field(default_factory=AdaptationPolicy)
    continuation: ContinuationSpec | None = Field(
        default=None, description="wake this agent session when the round ends"
    )
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=200)


class GroupView(_Out):
    """The group-level view: one answer for all children."""

    group_id: str
    objective: str
    state: Literal["running", "completed", "failed", "cancelled"]
    round: int
    children: tuple[TaskHandle, ...]
    counts: dict[str, int]
    next: str = _NEXT
