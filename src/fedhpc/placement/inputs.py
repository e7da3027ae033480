"""What a placement decides from besides the envelope, in one value: the snapshot and the sites,
the policy, the wait estimators' inputs (history, the schedulers' answers, their recent
errors), the runtime inputs, the credit bound, and the ledger of claims the snapshot cannot
show yet. The daemon builds one per decision (or per group pass) and `place` / `place_group`
read it; tests and benchmarks build theirs the same way."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from datetime import datetime

from fedhpc.domain.config import Site
from fedhpc.domain.site import ResourceSnapshot
from fedhpc.placement.context import Ledger
from fedhpc.placement.errors import EstimatorErrors
from fedhpc.placement.estimators import (
    EnvCache,
    RuntimeDeclaration,
    RuntimeObservation,
    SchedulerEstimates,
    WaitHistory,
    WaitObservation,
)
from fedhpc.placement.policy import Policy

__all__ = ["TOP", "PlacementInputs"]

TOP = 8  # the best candidates every trace ranks exactly as a full evaluation would


@dataclass(frozen=True, slots=True)
class PlacementInputs:
    """Every input of a decision but the envelope. Pure data: nothing here does I/O.

    `history`: observed waits, or the learned estimator's index built from them once per
    control cycle. `estimates`: the schedulers' predicted starts (`start_estimates`);
    `estimate_notes` say per site why some are missing, and the trace repeats it; `errors` (the
    estimators' recent errors) let `auto` prefer the better of learned and paper. `ledger`
    carries claims the snapshot cannot show yet (earlier children of a group, jobs dispatched
    since the last probe); `place_group` adds its children's claims to it. `prune=False`
    scores every partition (the reference the pruned path must agree with); `top` is how many
    of the best candidates the trace ranks exactly; `score` names (site, partition) pairs to
    score even when their bound prunes them (a caller comparing against where a job already
    waits)."""

    snapshot: ResourceSnapshot
    sites: Mapping[str, Site]
    policy: Policy | None = None  # None: the default policy
    _: KW_ONLY
    now: datetime
    history: Sequence[WaitObservation] | WaitHistory = ()
    estimates: SchedulerEstimates | None = None
    estimate_notes: Mapping[str, str] | None = None
    errors: EstimatorErrors | None = None
    runtime: RuntimeDeclaration | None = None
    runtime_history: Sequence[RuntimeObservation] = ()
    env_cache: EnvCache | None = None
    environment: str | None = None
    task_budget: float | None = None
    # Per site: what the task's person may still spend there (`person_budget`), and why.
    person_budget: Mapping[str, tuple[float, str]] | None = None
    # Per site that runs each person as themselves: why the task's person cannot run there.
    person_refused: Mapping[str, str] | None = None
    # Per site whose controller just missed a ping (the orchestrator's suspect sites): why.
    suspect: Mapping[str, str] | None = None
    ledger: Ledger | None = None
    prune: bool = True
    top: int = TOP
    score: Collection[tuple[str, str]] = ()
