"""ResourceEnvelope: minimum viable and maximum useful request, hard and soft constraints."""

from __future__ import annotations

import unicodedata
from enum import StrEnum
from typing import Annotated, Literal, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from fedhpc.domain.units import MAX_COUNT, MiB, Seconds

__all__ = [
    "Arch",
    "ContainerRequest",
    "DraftInfo",
    "DraftSource",
    "ImageRef",
    "IntRange",
    "MemoryRange",
    "Preferences",
    "ResourceEnvelope",
    "WallRange",
    "check_image",
]


class Arch(StrEnum):
    """CPU architecture as `uname -m` spells it."""

    X86_64 = "x86_64"
    AARCH64 = "aarch64"


class _Range(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    min: int
    max: int | None

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        lo, hi = self.min, self.max
        if hi is not None and hi < lo:
            raise ValueError(f"max ({hi}) is below min ({lo})")
        return self

    @property
    def upper(self) -> int:
        """The maximum useful value; equal to min when no max was given."""
        return self.min if self.max is None else self.max


class IntRange(_Range):
    """A count bounded below by the minimum viable value and above by the maximum useful one."""

    # strict: a count is a JSON integer; true, "10" or 2.0 is a slip, not a count
    min: int = Field(default=0, ge=0, le=MAX_COUNT, strict=True, description="minimum viable")
    max: int | None = Field(
        default=None,
        ge=0,
        le=MAX_COUNT,
        strict=True,
        description="maximum useful; None means = min",
    )


class MemoryRange(_Range):
    """Memory per node in MiB (strings such as '64G' are accepted)."""

    min: MiB = Field(default=0, ge=0)
    max: MiB | None = Field(default=None, ge=0)


class WallRange(_Range):
    """Wall time in seconds (strings such as '2h' or '01:30:00' are accepted)."""

    min: Seconds = Field(default=600, ge=1)
    max: Seconds | None = Field(default=None, ge=1)


def check_image(image: str) -> str:
    """A container image reference or .sif path: no whitespace, control or format characters
    (an ESC or a NUL reached the job script, or failed the task later as `internal`), and no
    leading '-' (the runtime would read it as one of its own options). Raises ValueError."""
    for ch in image:
        if ch.isspace() or unicodedata.category(ch) in {"Cc", "Cf"}:
            raise ValueError(
                f"contains U+{ord(ch):04X} ({unicodedata.name(ch, 'a control character')}): "
                "an image reference or .sif path has no spaces or control characters"
            )
    if image.startswith("-"):
        raise ValueError("starts with '-': the container runtime would read it as an option")
    return image


ImageRef = Annotated[str, AfterValidator(check_image)]


class ContainerRequest(BaseModel):
    """A container the task must run in; the site must support one of the runtimes."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    image: ImageRef = Field(
        min_length=1, max_length=512, description="image reference or .sif path"
    )
    runtimes: tuple[str, ...] = Field(
        default=("apptainer", "singularity", "podman-hpc", "shifter", "enroot"),
        description="acceptable runtimes, most preferred first",
    )


class Preferences(BaseModel):
    """Soft preferences: they order feasible candidates but never make one infeasible."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    sites: tuple[str, ...] = Field(default=(), description="preferred sites, best first")
    partitions: tuple[str, ...] = Field(default=(), description="preferred 'site/partition'")
    spread: bool = Field(default=False, description="spread related tasks across systems")
    goal: Literal["fastest", "cheapest", "balanced"] | None = Field(
        default=None,
        description="what the pick spends: time, the allocation (least charge) or both; "
        "None: the request's goal, else the user config's",
    )


class DraftSource(StrEnum):
    """Who proposed an envelope."""

    USER = "user"
    ASSISTANT = "assistant"
    HISTORY = "history"
    HEURISTIC = "heuristic"
    DEFAULT = "default"


class DraftInfo(BaseModel):
    """Provenance of a drafted envelope: auditable, never authoritative."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    source: DraftSource
    rationale: str = Field(default="", max_length=4000)
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)


class ResourceEnvelope(BaseModel):
    """Min/max bounds per dimension (per node for GPUs, CPUs and memory) and constraints."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    gpus: IntRange = Field(default_factory=IntRange, description="GPUs per node")
    cpus: IntRange = Field(default_factory=lambda: IntRange(min=1), description="CPUs per node")
    memory: MemoryRange = Field(default_factory=MemoryRange, description="memory per node, MiB")
    nodes: IntRange = Field(default_factory=lambda: IntRange(min=1))
    wall_time: WallRange = Field(default_factory=WallRange)

    architectures: tuple[Arch, ...] = Field(default=(), description="allowed; empty = any")
    accelerator_types: tuple[str, ...] = Field(
        default=(), description="allowed accelerator types such as 'a100', 'h100'; empty = any"
    )
    min_accelerator_memory_gib: float = Field(default=0, ge=0, le=MAX_COUNT, strict=True)
    container: ContainerRequest | None = None
    sites_include: tuple[str, ...] = Field(default=(), description="only these sites; empty = all")
    sites_exclude: tuple[str, ...] = Field(default=())
    preferences: Preferences = Field(default_factory=Preferences)
    draft: DraftInfo | None = Field(default=None, description="set when the envelope was drafted")

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.nodes.min < 1:
            raise ValueError("nodes.min must be at least 1")
        if self.cpus.min < 1:
            raise ValueError("cpus.min must be at least 1")
        both = set(self.sites_include) & set(self.sites_exclude)
        if both:
            raise ValueError(f"sites both included and excluded: {sorted(both)}")
        if self.gpus.upper == 0 and (self.accelerator_types or self.min_accelerator_memory_gib):
            raise ValueError("accelerator constraints given but gpus.max is 0")
        return self

    @property
    def wants_gpus(self) -> bool:
        return self.gpus.min > 0
