"""The decision trace: every candidate with its rule results, estimates and tie-break key."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from fedhpc.domain.envelope import ResourceEnvelope
from fedhpc.domain.job import Shape
from fedhpc.placement.rules import Outcome, RuleResult
from fedhpc.placement.settings import Policy

__all__ = [
    "CandidateReasons",
    "CandidateTrace",
    "DecisionTrace",
    "Estimates",
    "Placement",
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


class DecisionTrace(_Model):
    """Everything needed to audit and replay a decision; stored with the task."""

    now: datetime
    snapshot_at: datetime
    policy: Policy
    envelope: ResourceEnvelope
    key_fields: tuple[str, ...]
    candidates: tuple[CandidateTrace, ...]  # feasible best first (by key), then rejected by id
    chosen: str | None
    feasible: int
    # Which wait estimate ranked the candidates: the scheduler's for how many, and why not for
    # the others ("" when the caller did not ask the schedulers).
    estimates_note: str = ""


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
