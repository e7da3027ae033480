"""Place a group's children one after another against one snapshot, each seeing the earlier
children's claims (capacity, queue position, credit) through a ledger."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from fedhpc.domain.envelope import ResourceEnvelope
from fedhpc.domain.site import ResourceSnapshot
from fedhpc.domain.units import as_utc
from fedhpc.placement.context import Ledger, PartitionMemo
from fedhpc.placement.estimators import (
    EnvCache,
    RuntimeDeclaration,
    SchedulerEstimates,
    WaitHistory,
    WaitObservation,
)
from fedhpc.placement.place import place
from fedhpc.placement.settings import Policy
from fedhpc.placement.trace import Placement, Unschedulable
from fedhpc.profiles.loader import Site

__all__ = ["place_group"]


def place_group(
    envelopes: Sequence[ResourceEnvelope],
    snapshot: ResourceSnapshot,
    sites: Mapping[str, Site],
    policy: Policy | None = None,
    *,
    now: datetime,
    history: Sequence[WaitObservation] = (),
    estimates: SchedulerEstimates | None = None,
    runtime: RuntimeDeclaration | None = None,
    env_cache: EnvCache | None = None,
    task_budget: float | None = None,
) -> list[Placement | Unschedulable]:
    """One decision per child, in order. Deterministic like `place`."""
    policy = policy or Policy()
    now = as_utc(now)
    waits = WaitHistory(history, now=now, settings=policy.settings) if history else ()
    ledger = Ledger()
    memo = PartitionMemo()  # children share envelopes: unchanged partitions are not re-evaluated
    out: list[Placement | Unschedulable] = []
    for env in envelopes:
        decision = place(
            env, snapshot, sites, policy, now=now, history=waits, estimates=estimates,
            runtime=runtime, env_cache=env_cache, task_budget=task_budget, ledger=ledger,
            memo=memo,
        )  # fmt: skip
        if isinstance(decision, Placement):
            ledger.claim(
                decision.site, decision.partition, decision.account, decision.shape,
                decision.estimates.charge,
            )  # fmt: skip
        out.append(decision)
    return out
