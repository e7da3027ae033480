"""What probes see of a site: partitions' nodes and jobs, the user's credit, the site's health,
and the federation at one moment (the static profile: `domain/site.py`)."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from fedhpc.domain.envelope import Arch
from fedhpc.domain.units import UtcDatetime

__all__ = [
    "Credit",
    "Health",
    "NodeStateCounts",
    "PartitionState",
    "ResourceSnapshot",
    "SiteState",
    "Unread",
]

# Parts of a probe's answer that can fail alone while the rest is read: the user's
# accounts and usage (Slurm's sshare), the queue counts (squeue), the allocation balances,
# the partitions' billing weights (Slurm's `scontrol show partition`, not read every probe).
Unread = Literal["accounts", "queue", "balance", "billing"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class Health(StrEnum):
    """How usable a site looks from the last probe."""

    OK = "ok"
    DEGRADED = "degraded"
    OFFLINE = "offline"


class NodeStateCounts(_Frozen):
    """Nodes per state bucket (sinfo's %F: allocated/idle/other, plus mixed split out)."""

    idle: int = 0
    mixed: int = 0
    allocated: int = 0
    down: int = 0
    drain: int = 0
    other: int = 0

    @property
    def total(self) -> int:
        return self.idle + self.mixed + self.allocated + self.down + self.drain + self.other

    @property
    def usable(self) -> int:
        return self.idle + self.mixed + self.allocated


class PartitionState(_Frozen):
    """Live view of one partition from one probe."""

    name: str
    nodes: NodeStateCounts = Field(default_factory=NodeStateCounts)
    total_gpus: int = 0
    free_gpus: int = 0
    free_gpus_by_type: dict[str, int] = Field(default_factory=dict)
    total_cpus: int = 0
    free_cpus: int = 0
    free_memory_mib: int = 0
    max_free_gpus_on_node: int = 0
    max_free_cpus_on_node: int = 0
    pending_jobs: int = 0
    blocked_pending_jobs: int = Field(
        default=0, description="of pending_jobs, those waiting on a dependency, hold or begin time"
    )
    running_jobs: int = 0
    user_pending_jobs: int = 0
    user_running_jobs: int = 0
    available: bool = Field(default=True, description="partition state is UP")
    billing_weights: tuple[tuple[str, float], ...] = Field(
        default=(),
        description="the scheduler's billing weights (TRES, per unit-hour; memory per GiB); "
        "empty: none set or not read",
    )


class Credit(_Frozen):
    """Allocation balance as the user's budget, with live usage where the site exposes it.
    Probe numbers may arrive non-finite; the collector's `sanitize_state` clears them and sets
    `unusable`, which placement's credit rule refuses."""

    # Probe output is checked by the collector, which needs to see a NaN to report it.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=True)

    account: str
    budget: float | None = Field(default=None, description="what the user allows, site credits")
    used: float | None = Field(default=None, description="live usage reported by the site")
    balance: float | None = Field(default=None, description="remaining per the site's command")
    unit: str = "SU"
    unusable: str | None = Field(
        default=None, description="why the site's credit numbers cannot be trusted (NaN, absurd)"
    )

    @property
    def remaining(self) -> float | None:
        if self.unusable is not None:
            return None
        if self.balance is not None and self.budget is not None:
            return min(self.balance, self.budget - (self.used or 0.0))
        if self.balance is not None:
            return self.balance
        if self.budget is not None:
            return self.budget - (self.used or 0.0)
        return None


class SiteState(_Frozen):
    """Live view of one site from one batched probe."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=True)

    site: str
    health: Health
    collected_at: UtcDatetime
    arch: Arch | None = None
    partitions: tuple[PartitionState, ...] = ()
    accounts: tuple[str, ...] = Field(default=(), description="accounts the user can charge")
    credit: tuple[Credit, ...] = ()
    error: str | None = None
    latency_s: float | None = None
    unread: tuple[Unread, ...] = Field(
        default=(),
        description="parts this probe could not read; the collector keeps the last reading",
    )

    def partition(self, name: str) -> PartitionState | None:
        return next((p for p in self.partitions if p.name == name), None)


class ResourceSnapshot(_Frozen):
    """The federation at one moment: one SiteState per enabled site."""

    taken_at: UtcDatetime
    sites: dict[str, SiteState] = Field(default_factory=dict)
