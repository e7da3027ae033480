"""The task contract's requests: submit_task, submit_group, get_result, replan, cancel (their
answers: ops/task_views.py)."""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from fedhpc.domain.envelope import ImageRef, ResourceEnvelope
from fedhpc.domain.job import EnvName, EnvValue, SafePath
from fedhpc.domain.units import MAX_CREDITS, MAX_GROUP_CHILDREN, MAX_SECONDS
from fedhpc.ops.continuations import ContinuationSpec
from fedhpc.ops.data import StageOut
from fedhpc.ops.scripts import MAX_SCRIPT_CHARS, ScriptReading, check_script, with_script
from fedhpc.ops.sitecheck import SiteName
from fedhpc.ops.workdir import check_output, check_workdir
from fedhpc.placement.policy import Goal, PolicyKind

__all__ = [
    "PREVIEW_BYTES",
    "AdaptationPolicy",
    "CancelRequest",
    "GroupChild",
    "ReplanRequest",
    "ResultRequest",
    "SubmitGroupRequest",
    "SubmitTaskRequest",
    "check_argv",
]


# An output is confined like workdir (ops/workdir.py): its sizes are reported back, so a path
# outside the task's folder and the storage roots would tell whether /etc or /proc files exist.
OutputPath = Annotated[SafePath, AfterValidator(check_output)]


class _In(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class AdaptationPolicy(_In):
    """What fedhpc may do on its own, each with a budget; beyond it, the agent decides."""

    max_retries: int = Field(
        default=1, ge=0, le=10, strict=True, description="resubmissions of failed work"
    )
    max_wall_extensions: int = Field(
        default=1,
        ge=0,
        le=5,
        strict=True,
        description="after a timeout, resubmit with longer wall time",
    )
    wall_factor: float = Field(
        default=2.0, gt=1, le=10, strict=True, description="wall-time growth per try"
    )
    replace_pending: bool = Field(
        default=True, description="move a pending attempt when another site is clearly better"
    )
    replace_after_s: float = Field(
        default=120.0, ge=0, le=MAX_SECONDS, strict=True, description="pending this long first"
    )
    replace_margin_s: float = Field(
        default=60.0,
        ge=0,
        le=MAX_SECONDS,
        strict=True,
        description="the new placement must finish this much sooner",
    )
    max_replacements: int = Field(default=2, ge=0, le=10, strict=True)
    hedge_copies: int | None = Field(
        default=None,
        ge=1,
        le=3,
        strict=True,
        description="submit to up to this many sites at once while their forecasts overlap: "
        "the first to start runs, the others are cancelled; default: the user's config (1)",
    )
    hedge_min_gain_s: float | None = Field(
        default=None,
        ge=0,
        le=MAX_SECONDS,
        strict=True,
        description="a copy must bring the expected finish this much sooner; default: the "
        "user's config (60)",
    )


class SubmitTaskRequest(_In):
    """One job: what to run, within which bounds, and how much autonomy fedhpc has."""

    command: tuple[str, ...] = Field(
        min_length=1,
        max_length=1024,
        description="argv; every element is passed verbatim (default with `script`: its body)",
    )
    envelope: ResourceEnvelope = Field(
        description="min/max resources and constraints (with `script`: over its header's)"
    )
    script: Annotated[str, AfterValidator(check_script)] | None = Field(
        default=None,
        max_length=MAX_SCRIPT_CHARS,
        description="a #SBATCH, #PBS or #BSUB job script: its header gives the envelope's "
        "fields the request does not set; its body runs unchanged unless `command` is given",
    )
    script_reading: ScriptReading | None = Field(
        default=None, description="set by fedhpc from `script`: what its header gave"
    )
    name: str | None = Field(
        default=None,
        max_length=64,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        description="a label for people; the job name is fedhpc-<task>-<attempt>",
    )
    policy: PolicyKind = Field(
        default=PolicyKind.BEST_FEASIBLE, description="fixed_site alone implies fixed-site"
    )
    fixed_site: SiteName | None = Field(default=None, description="run only on this site")
    goal: Goal | None = Field(
        default=None,
        description="fastest | cheapest (least charge) | balanced; default: the user's config",
    )
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
    container_image: ImageRef | None = Field(
        default=None, min_length=1, max_length=512, description="image reference or .sif path"
    )
    outputs: tuple[OutputPath, ...] = Field(
        default=(),
        max_length=64,
        description="artifacts the task writes: relative to workdir, or absolute inside one of "
        "the site's storage roots (like workdir)",
    )
    task_budget: float | None = Field(
        default=None, ge=0, le=MAX_CREDITS, strict=True, description="credits for this task"
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
    def _script(cls, data: object) -> object:
        """A job script fills in the envelope fields and the command the request leaves out."""
        return with_script(data)

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


class CancelRequest(_In):
    task_id: str = Field(min_length=1, max_length=64)


class ReplanRequest(_In):
    """Re-place a task that has not started: exclude sites and/or change its envelope."""

    task_id: str = Field(min_length=1, max_length=64)
    exclude_sites: tuple[SiteName, ...] = Field(default=(), max_length=64)
    envelope: ResourceEnvelope | None = None


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
    goal: Goal | None = Field(
        default=None,
        description="fastest | cheapest (least charge) | balanced; default: the user's config",
    )
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

    @field_validator("policy")
    @classmethod
    def _policy(cls, v: PolicyKind) -> PolicyKind:
        if v is PolicyKind.FIXED_SITE:  # a group names no site: every child would fail alike
            raise ValueError(
                "a group has no fixed_site: to run every child on one site, set "
                "envelope.sites_include=['SITE'] with policy best-feasible"
            )
        return v

    @field_validator("children")
    @classmethod
    def _names(cls, v: tuple[GroupChild, ...]) -> tuple[GroupChild, ...]:
        seen: dict[str, int] = {}
        for i, child in enumerate(v):
            if child.name is None:
                continue
            if child.name in seen:  # results are read back by name: one would hide the other
                raise ValueError(
                    f"children[{i}].name {child.name!r} is also children[{seen[child.name]}]"
                    "'s name: give each child its own name (or none)"
                )
            seen[child.name] = i
        return v

    idempotency_key: str | None = Field(default=None, min_length=1, max_length=200)
    key_generated: bool = False
    caller: str | None = Field(default=None, max_length=200)
