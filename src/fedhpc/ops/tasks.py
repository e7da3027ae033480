"""The task contract: submit_task, submit_group, get_result, replan, cancel, and their answers."""

from __future__ import annotations

from datetime import datetime
from typing import Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from fedhpc.domain.envelope import ResourceEnvelope
from fedhpc.domain.job import EnvName, EnvValue, JobState, SafePath, Shape
from fedhpc.domain.units import MAX_CREDITS, MAX_GROUP_CHILDREN, MAX_SECONDS
from fedhpc.ops.continuations import ContinuationSpec
from fedhpc.ops.data import StageOut, TransferProvenance
from fedhpc.ops.workdir import check_workdir
from fedhpc.placement.policy import PolicyKind

__all__ = [
    "AdaptationPolicy",
    "AttemptView",
    "CancelRequest",
    "ChildView",
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
    "check_argv",
]


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
    policy: PolicyKind = Field(
        default=PolicyKind.BEST_FEASIBLE, description="fixed_site alone implies fixed-site"
    )
    fixed_site: str | None = Field(default=None, description="run only on this site")
    fallback: bool = Field(
        default=False,
        description="with fixed_site: if that site cannot run the task, place it elsewhere "
        "(the answer's decision says so); default: an error or unschedulable",
    )
    workdir: SafePath | None = Field(
        default=None,
        description="relative: under the task's folder on the site; absolute: inside one of "
        "the site's storage roots; default: the task's folder",
    )
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
        description=(
            "the same key returns the same task, never a second one; without a key, the same "
            "request from the same caller within the retry window does"
        ),
    )
    key_generated: bool = Field(
        default=False,
        description="the key was made by a gateway for this one call (the retry window applies)",
    )
    caller: str | None = Field(
        default=None, max_length=200, description="who asks (an agent session): scopes the window"
    )

    @model_validator(mode="before")
    @classmethod
    def _implied_policy(cls, data: object) -> object:
        """`fixed_site` without a policy means the fixed-site policy."""
        if isinstance(data, dict) and data.get("policy", "") is None:
            data = {k: v for k, v in data.items() if k != "policy"}
        if isinstance(data, dict) and data.get("fixed_site") and "policy" not in data:
            return {**data, "policy": PolicyKind.FIXED_SITE}
        return data

    @field_validator("command")
    @classmethod
    def _argv(cls, argv: tuple[str, ...]) -> tuple[str, ...]:
        return check_argv(argv)

    @field_validator("workdir")
    @classmethod
    def _workdir(cls, v: str | None) -> str | None:
        return check_workdir(v) if v is not None else None

    @field_validator("fixed_site")
    @classmethod
    def _fixed_site(cls, v: str | None, info: ValidationInfo) -> str | None:
        policy = info.data.get("policy")
        if v and policy is not None and policy is not PolicyKind.FIXED_SITE:
            raise ValueError(
                f"used only by policy fixed-site, not {policy.value}: drop policy "
                "(fixed_site implies fixed-site) or drop fixed_site"
            )
        return v

    @field_validator("fallback")
    @classmethod
    def _fallback(cls, v: bool, info: ValidationInfo) -> bool:
        if v and not info.data.get("fixed_site"):
            raise ValueError("applies only with fixed_site")
        return v

    @model_validator(mode="after")
    def _fixed(self) -> Self:
        if self.policy is PolicyKind.FIXED_SITE and not self.fixed_site:
            raise ValueError("policy fixed-site needs fixed_site (the site to run on)")
        return self


def check_argv(argv: tuple[str, ...]) -> tuple[str, ...]:
    """The program must be a name or path (an empty or space-padded one can only fail later);
    later arguments may be empty (`printf ''` means it), never hold NUL."""
    if argv and not argv[0].strip():
        raise ValueError("command[0] is empty: the first element is the program to run")
    if argv and argv[0] != argv[0].strip():
        raise ValueError(f"command[0] {argv[0]!r} has surrounding spaces; no shell trims them")
    for i, arg in enumerate(argv):
        if "\x00" in arg:
            raise ValueError(f"command[{i}] contains NUL")
    return argv


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
    existing: str | None = Field(
        default=None, description="set when this call matched an earlier submission"
    )
    next: str = Field(default="", description="what to do now (empty on a group's children)")


class AttemptView(_Out):
    """One scheduler job of a task."""

    n: int
    site: str
    partition: str
    state: JobState
    account: str | None = None
    qos: str | None = None
    shape: Shape | None = Field(default=None, description="absent in get_result's brief form")
    job_name: str = ""
    job_id: str | None = None
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
    path: str
    site: str | None = Field(default=None, description="absent: the current attempt's site")
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
    pruned: int = Field(
        default=0,
        description="partitions not scored: failing a rule by class, or unable to rank",
    )


PREVIEW_BYTES = 2048


class ResultRequest(_In):
    """get_result: a task's manifest with bounded tails of its output.

    `preview` names the stream whose tail goes in `preview` (default stdout; "none" for
    none); when the task failed or timed out, the tail of stderr comes too (in `stderr`).
    `brief` (the MCP face) leaves out what the agent already has: timestamps, shapes, job
    names, provenance, and output files whose whole content is in a tail."""

    task_id: str = Field(min_length=1, max_length=64)
    preview: Literal["stdout", "stderr", "none"] | None = None
    max_bytes: int = Field(default=PREVIEW_BYTES, ge=1, le=65536)
    brief: bool = False


class ResultManifest(_Out):
    """The compact answer of get_result."""

    task_id: str
    state: JobState
    name: str | None = None
    group_id: str | None = None
    created_at: datetime | None = None
    attempts: tuple[AttemptView, ...] = ()
    provenance: Provenance | None = None
    outputs: tuple[OutputRef, ...] = ()
    preview: str | None = Field(default=None, description="the last bytes of stdout (or asked)")
    truncated: bool = Field(default=False, description="preview omits earlier bytes")
    stderr: str | None = Field(
        default=None, description="the last bytes of stderr, on failure (its size: outputs)"
    )
    reasons: tuple[str, ...] = ()
    waiting: str | None = Field(
        default=None,
        description="a queued task: why fedhpc holds it (a per-user job limit, missing site "
        "data) and when it goes on",
    )
    data: tuple[TransferProvenance, ...] = Field(default=(), description="stage-in/out transfers")
    next: str = ""


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


class ChildView(_Out):
    """One child of a group, where it is now."""

    task_id: str
    name: str | None = None
    state: JobState
    site: str | None = None
    partition: str | None = None
    job_id: str | None = None
    decision: str = ""
    reasons: tuple[str, ...] = ()


class GroupChild(_In):
    """One child of a group: its own command and label; it shares the group's envelope."""

    command: tuple[str, ...] = Field(min_length=1, max_length=1024)
    name: str | None = Field(default=None, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    required: bool = Field(default=True, description="the round waits for it")

    @field_validator("command")
    @classmethod
    def _argv(cls, argv: tuple[str, ...]) -> tuple[str, ...]:
        return check_argv(argv)


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

    @field_validator("workdir")
    @classmethod
    def _workdir(cls, v: str | None) -> str | None:
        return check_workdir(v) if v is not None else None

    idempotency_key: str | None = Field(default=None, min_length=1, max_length=200)
    key_generated: bool = False
    caller: str | None = Field(default=None, max_length=200)


GROUP_PAGE = 200  # children per page of the group view (GET /v1/groups/{id}, the resource)
GROUP_PAGE_MAX = 1000


class GroupView(_Out):
    """The group-level view: one answer for all children, bounded whatever the group's size."""

    group_id: str
    objective: str
    state: Literal["placing", "running", "completed", "failed", "cancelled"] = Field(
        description="placing: some children are still queued in fedhpc"
    )
    round: int
    size: int = Field(description="number of children")
    child_ids: str = Field(description="child i has the id <group prefix>-<i>: first … last")
    counts: dict[str, int] = Field(description="children per state")
    sites: dict[str, int] = Field(default_factory=dict, description="placed children per site")
    children: tuple[ChildView, ...]
    omitted: int = Field(
        default=0,
        description="children not listed here: read fedhpc://groups/{id} (pages of "
        f"{GROUP_PAGE}; next_after names the next page)",
    )
    next_after: str | None = Field(
        default=None,
        description="more children follow: read fedhpc://groups/{id}/after/{next_after} "
        "(REST: ?after=)",
    )
    existing: str | None = Field(
        default=None, description="set when this call matched an earlier submission"
    )
    next: str = ""
