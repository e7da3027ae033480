"""What one rule or estimator sees: a partition's profile, its live capacity, a candidate."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from fedhpc.domain.config import Site
from fedhpc.domain.envelope import ResourceEnvelope
from fedhpc.domain.job import Shape
from fedhpc.domain.site import PartitionSpec, PartitionState, SiteProfile, SiteState
from fedhpc.placement.policy import Settings

if TYPE_CHECKING:
    from fedhpc.placement.credit import Budget, Charge

__all__ = [
    "CandidateContext",
    "Ledger",
    "Live",
    "PartitionContext",
    "shape_key",
    "user_pending_at",
]


def shape_key(shape: Shape) -> str:
    """A short stable name for a shape: nodes, GPUs, CPUs, memory (MiB) and wall time (s)."""
    acc = f"-{shape.accelerator_type}" if shape.accelerator_type else ""
    return (
        f"n{shape.nodes}-g{shape.gpus}{acc}-c{shape.cpus}-m{shape.memory_mib}-t{shape.wall_time_s}"
    )


@dataclass(slots=True)
class Ledger:
    """Claims by earlier placements of the same group that the snapshot cannot show yet.

    The only mutable thing placement touches; its owner (a group placer) adds to it between calls.
    """

    gpus: dict[tuple[str, str], int] = field(default_factory=dict)
    cpus: dict[tuple[str, str], int] = field(default_factory=dict)
    jobs: dict[tuple[str, str], int] = field(default_factory=dict)
    spent: dict[tuple[str, str | None], float] = field(default_factory=dict)
    site_total: dict[str, float] = field(default_factory=dict)
    # How many times each partition's and each site's entries above changed (`fingerprint`).
    changes: dict[tuple[str, str], int] = field(default_factory=dict)
    site_changes: dict[str, int] = field(default_factory=dict)

    def claim(
        self, site: str, partition: str, account: str | None, shape: Shape, charge: float
    ) -> None:
        key = (site, partition)
        self.gpus[key] = self.gpus.get(key, 0) + shape.gpus * shape.nodes
        self.cpus[key] = self.cpus.get(key, 0) + shape.cpus * shape.nodes
        self.jobs[key] = self.jobs.get(key, 0) + 1
        self.spent[(site, account)] = self.spent.get((site, account), 0.0) + charge
        self.site_total[site] = self.site_total.get(site, 0.0) + charge
        self.changes[key] = self.changes.get(key, 0) + 1
        self.site_changes[site] = self.site_changes.get(site, 0) + 1

    def release(self, site: str, partition: str) -> None:
        """A job of the user's that the snapshot still counts has ended: one fewer there."""
        key = (site, partition)
        self.jobs[key] = self.jobs.get(key, 0) - 1
        self.changes[key] = self.changes.get(key, 0) + 1

    def site_spent(self, site: str) -> float:
        return self.site_total.get(site, 0.0)

    def fingerprint(self, key: tuple[str, str]) -> tuple[int, int]:
        """How often a claim changed what one partition's evaluation reads: the claims on
        the partition itself (capacity, queue, the user's jobs there), then the site's
        spending (what the user may still spend there)."""
        return self.changes.get(key, 0), self.site_changes.get(key[0], 0)


def user_pending_at(site: str, state: SiteState | None, ledger: Ledger | None) -> int:
    """The user's pending jobs at `site`: the last probe's, across its partitions, plus the
    jobs placed there since (the ledger's: they queue before they run)."""
    probed = sum(p.user_pending_jobs for p in state.partitions) if state is not None else 0
    since = sum(n for (s, _), n in ledger.jobs.items() if s == site) if ledger else 0
    return probed + max(0, since)


@dataclass(frozen=True, slots=True)
class Live:
    """A partition's observed capacity with the ledger's claims taken off."""

    free_gpus: int
    max_free_gpus_on_node: int
    free_cpus: int
    max_free_cpus_on_node: int
    free_memory_mib: int
    free_nodes: int
    usable_nodes: int
    pending: int
    running: int
    user_jobs: int
    blocked: int = 0  # of `pending`, jobs that cannot start now whatever is free (dependencies)

    @classmethod
    def of(cls, site: str, p: PartitionState, ledger: Ledger | None) -> Live:
        key = (site, p.name)
        g = ledger.gpus.get(key, 0) if ledger else 0
        c = ledger.cpus.get(key, 0) if ledger else 0
        j = ledger.jobs.get(key, 0) if ledger else 0
        free_gpus = max(0, p.free_gpus - g)
        free_cpus = max(0, p.free_cpus - c)
        return cls(
            free_gpus=free_gpus,
            max_free_gpus_on_node=min(p.max_free_gpus_on_node, free_gpus),
            free_cpus=free_cpus,
            max_free_cpus_on_node=min(p.max_free_cpus_on_node, free_cpus),
            free_memory_mib=p.free_memory_mib,
            free_nodes=p.nodes.idle + p.nodes.mixed,
            usable_nodes=p.nodes.usable,
            # Claimed jobs count as queued: they will be ahead of the next child.
            pending=p.pending_jobs + j,
            running=p.running_jobs,
            user_jobs=p.user_pending_jobs + p.user_running_jobs + j,
            blocked=p.blocked_pending_jobs,
        )


@dataclass(frozen=True, slots=True)
class PartitionContext:
    """Everything about one (site, partition) that every candidate there shares."""

    envelope: ResourceEnvelope
    site: Site
    spec: PartitionSpec
    state: SiteState | None
    pstate: PartitionState | None
    live: Live | None
    now: datetime
    settings: Settings
    ledger: Ledger | None
    task_budget: float | None
    fixed_site: str | None = None
    refused: str | None = None  # why the task's person may not run at this site (service mode)
    suspect: str | None = None  # why the site is suspect now (its controller missed a ping)

    @property
    def profile(self) -> SiteProfile:
        return self.site.profile

    @property
    def name(self) -> str:
        return f"{self.site.name}/{self.spec.name}"


@dataclass(frozen=True, slots=True)
class CandidateContext:
    """One candidate: a partition, an account (None when none applies) and a concrete shape."""

    part: PartitionContext
    account: str | None
    qos: str | None
    shape: Shape
    charge: Charge
    budget: Budget
