"""The decision trace: every candidate with its rule results, estimates and tie-break key."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from fedhpc.domain.envelope import ResourceEnvelope
from fedhpc.domain.job import Shape
from fedhpc.placement.policy import Policy
from fedhpc.placement.rules import Outcome, RuleResult

__all__ = [
    "CandidateReasons",
    "CandidateTrace",
    "DecisionTrace",
    "Estimates",
    "Placement",
    "PrunedClass",
    "Unschedulable",
]

KeyPart = float | int | str


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


@dataclass(frozen=True, slots=True)
class Estimates:
    """The objective's parts for one feasible candidate, each with where it came from."""

    wait_s: float
    wait_p90_s: float
    wait_source: str
    runtime_s: float
    runtime_source: str
    env_s: float
    env_source: str
    completion_s: float  # W + R + E
    completion_p90_s: float  # W90 + R + E
    charge: float
    charge_unit: str
    credit_fraction: float  # charge / remaining site credit (0 when unknown)
    waste: int  # accelerators held but unused
    # What each estimator with data predicted for the wait (recorded with the job, to judge
    # the estimators against the observed wait later).
    wait_by: tuple[tuple[str, float], ...] = ()
    # p10/p50/p90 wait from the chosen estimator's recent residuals on this partition
    # (placement.calibration); None until it was judged on enough jobs there.
    wait_band: tuple[float, float, float] | None = None


@dataclass(frozen=True, slots=True)
class CandidateTrace:
    """One (site, partition, account, shape) and what every rule said about it. Plain
    dataclasses (like RuleResult) keep a decision cheap; pydantic serializes them in the trace."""

    id: str
    site: str
    partition: str
    account: str | None
    qos: str | None
    shape: Shape
    queue_depth: int | None
    feasible: bool
    rules: tuple[RuleResult, ...]
    estimates: Estimates | None = None
    key: tuple[KeyPart, ...] | None = None  # the sort key; ends in the stable id

    def failures(self) -> list[str]:
        return [f"{r.category.value}: {r.reason}" for r in self.rules if r.outcome is Outcome.FAIL]


@dataclass(frozen=True, slots=True)
class PrunedClass:
    """Partitions placement did not score, for one reason: a rule every one of them fails
    whatever the shape (`kind` is the rule's category; `{partition}` in the reason stands for
    each listed partition), or `dominated`: a lower bound on their best candidate is worse than
    every ranked candidate, so none could change the ranking the trace shows."""

    kind: str
    reason: str
    partitions: tuple[str, ...]  # "site/partition"


class DecisionTrace(_Model):
    """Everything needed to audit and replay a decision; stored with the task."""

    now: datetime
    snapshot_at: datetime
    policy: Policy
    envelope: ResourceEnvelope
    key_fields: tuple[str, ...]
    candidates: tuple[CandidateTrace, ...]  # feasible best first (by key), then rejected by id
    chosen: str | None
    feasible: int  # feasible candidates scored (the ranked ones above)
    # Partitions not scored, by class. The ranked candidates above are exactly those a full
    # evaluation would rank first (at least the best `ranked`); an unschedulable decision
    # evaluates every partition and prunes nothing.
    # Which wait estimate ranked the candidates: the scheduler's for how many, and why not for
    # the others ("" when the caller did not ask the schedulers).
    estimates_note: str = ""
    pruned: tuple[PrunedClass, ...] = ()
    ranked: int = 0  # how many of the best candidates the pruning guarantees (0: all)

    def pruned_partitions(self) -> int:
        return sum(len(c.partitions) for c in self.pruned)

    def site_reasons(self, site: str) -> list[str]:
        """Why `site`'s candidates and pruned partitions were rejected, candidates first."""
        out = [r.reason for c in self.candidates if c.site == site for r in c.rules if r.failed]
        prefix = f"{site}/"
        for p in self.pruned:
            for pid in p.partitions:
                if pid.startswith(prefix):
                    out.append(p.reason.replace("{partition}", pid))
                    break
        return out


class Placement(_Model):
    """The chosen candidate, the granted shape, and the trace."""

    state: Literal["placed"] = "placed"
    candidate_id: str
    site: str
    partition: str
    account: str | None
    qos: str | None
    shape: Shape
    estimates: Estimates
    trace: DecisionTrace


@dataclass(frozen=True, slots=True)
class CandidateReasons:
    """Why one candidate was rejected."""

    id: str
    reasons: tuple[str, ...]


class Unschedulable(_Model):
    """No candidate passed every rule: per-candidate explanations and what to relax."""

    state: Literal["unschedulable"] = "unschedulable"
    hint: str
    reasons: tuple[CandidateReasons, ...]
    trace: DecisionTrace
