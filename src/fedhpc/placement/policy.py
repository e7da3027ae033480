"""Placement policy and the numbers its rules and estimators use; all of it goes in the trace."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from fedhpc.domain.units import MAX_COUNT, MAX_SECONDS

__all__ = ["Goal", "Objective", "Policy", "PolicyKind", "Settings", "WaitMethod"]


class PolicyKind(StrEnum):
    """How a feasible candidate is chosen (the paper's Table IV compares all three)."""

    BEST_FEASIBLE = "best-feasible"  # minimum estimated completion W + R + E
    SHORTEST_QUEUE = "shortest-queue"  # fewest pending jobs in the partition
    FIXED_SITE = "fixed-site"  # one named site whenever it is feasible


class Objective(StrEnum):
    """Which completion estimate best-feasible minimises."""

    EXPECTED = "expected"  # typical wait
    P90 = "p90"  # 90th-percentile wait: trades a little median for a shorter tail


class Goal(StrEnum):
    """What best-feasible spends: time or the allocation (each candidate's estimated charge)."""

    FASTEST = "fastest"  # earliest completion; charge only breaks ties through credit share
    CHEAPEST = "cheapest"  # lowest estimated charge; earliest completion among equal charges
    BALANCED = "balanced"  # completion + charge x Settings.balanced_s_per_unit


class WaitMethod(StrEnum):
    """Where the queue-wait estimate comes from."""

    PAPER = "paper"  # request-sized free slots, then queue depth
    SCHEDULER = "scheduler"  # sbatch --test-only supplied as input; paper when missing
    LEARNED = "learned"  # this federation's observed waits; paper when too few
    AUTO = "auto"  # scheduler, else learned, else paper


class Settings(BaseModel):
    """Tunable numbers. Defaults are deliberately coarse: estimates rank, they do not promise."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    dispatch_s: float = Field(
        default=10.0, ge=0, le=MAX_SECONDS, description="wait when a slot is free now"
    )
    per_pending_s: float = Field(
        default=120.0,
        ge=0,
        le=MAX_SECONDS,
        description="paper estimator: wait per job queued ahead",
    )
    uncertainty_factor: float = Field(
        default=2.0, ge=1, le=1000, description="p90/expected for estimates without history"
    )
    staleness_factor: float = Field(
        default=5.0, gt=0, le=1000, description="a probe older than this x min_refresh_s is stale"
    )
    min_staleness_s: float = Field(
        default=60.0, ge=0, le=MAX_SECONDS, description="floor of the stale bound"
    )
    learned_min_samples: int = Field(default=3, ge=1, le=MAX_COUNT)
    learned_window_s: float = Field(default=14 * 86400.0, gt=0, le=MAX_SECONDS)
    learned_max_samples: int = Field(
        default=200, ge=1, le=MAX_COUNT, description="most recent per bucket"
    )
    default_prepare_s: float = Field(
        default=600.0, ge=0, le=MAX_SECONDS, description="E when uncached"
    )
    serial_fraction: float = Field(
        default=0.1, ge=0, le=1, description="Amdahl serial fraction when history cannot fit one"
    )
    allow_cpu_on_gpu_partitions: bool = False
    max_shapes: int = Field(
        default=4, ge=1, le=64, description="joint sizing: shapes per partition"
    )
    balanced_s_per_unit: float = Field(
        default=3600.0,
        ge=0,
        le=MAX_SECONDS,
        description="goal balanced: seconds of completion one unit of charge is worth",
    )
    wall_margin: float = Field(
        default=0.1, ge=0, le=10, description="a shape's wall time covers runtime x (1 + this)"
    )


class Policy(BaseModel):
    """The selectable placement policy."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    kind: PolicyKind = PolicyKind.BEST_FEASIBLE
    site: str | None = Field(default=None, description="FIXED_SITE: the site")
    fallback: bool = Field(
        default=True, description="FIXED_SITE: use other sites when the fixed one is infeasible"
    )
    objective: Objective = Objective.EXPECTED
    goal: Goal = Field(
        default=Goal.FASTEST, description="best-feasible: fastest, cheapest or balanced"
    )
    wait: WaitMethod = WaitMethod.AUTO
    joint_sizing: bool = Field(
        default=True, description="best-feasible: evaluate several legal shapes per partition"
    )
    settings: Settings = Field(default_factory=Settings)
