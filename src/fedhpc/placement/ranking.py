"""Ranking: each policy as a sort key (the primary criterion, then the tie-break chain, then the
id)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from fedhpc.domain.envelope import Preferences
from fedhpc.placement.policy import Goal, Objective, Policy, PolicyKind
from fedhpc.placement.trace import Estimates

__all__ = [
    "KEY_TAIL",
    "preference_rank",
    "primary_fields",
    "sort_key",
    "waste",
    "whole_seconds",
    "with_credit_fraction",
]

# After the policy's primary criterion: lower fraction of remaining site credit, lower
# specialized-resource waste, user preference (site, partition, account order), stable id.
KEY_TAIL = (
    "credit_fraction",
    "waste",
    "preferred_site",
    "preferred_partition",
    "account_rank",
    "id",
)


@dataclass(frozen=True, slots=True)
class Ranked:
    """What a policy needs to know about a feasible candidate besides its estimates."""

    id: str
    site: str
    partition: str
    account_rank: int
    queue_depth: int


def primary_fields(policy: Policy) -> tuple[str, ...]:
    completion = "completion_p90_s" if policy.objective is Objective.P90 else "completion_s"
    if policy.kind is PolicyKind.SHORTEST_QUEUE:
        return ("queue_depth",)
    if policy.kind is PolicyKind.FIXED_SITE:
        return ("not_fixed_site", completion)
    if policy.goal is Goal.CHEAPEST:
        return ("charge", completion)
    if policy.goal is Goal.BALANCED:
        return (f"{completion}+charge*{policy.settings.balanced_s_per_unit:g}s", completion)
    return (completion,)


def _charge(value: float) -> float:
    """A charge for sorting: rounded (estimates are coarse), unknown or absurd ranks last."""
    return round(value, 3) if math.isfinite(value) and value >= 0 else math.inf


def preference_rank(prefs: Preferences, site: str, partition: str) -> tuple[int, int]:
    """Position in the user's preference lists; unlisted sorts after every listed one."""
    sites, parts = prefs.sites, prefs.partitions
    ref = f"{site}/{partition}"
    s = sites.index(site) if site in sites else len(sites)
    p = parts.index(ref) if ref in parts else len(parts)
    return s, p


def waste(gpus_per_node: int, nodes: int, accelerators_per_node: int, whole_node: bool) -> int:
    """Accelerators the job holds but does not use: whole-node charging (or exclusive nodes)
    makes the unused ones on each node unavailable to everyone else."""
    if not whole_node:
        return 0
    return max(0, accelerators_per_node - gpus_per_node) * nodes


# Estimates past this many seconds all rank alike (and last): no estimate means "never".
_NEVER_S = 10**15


def whole_seconds(value: float) -> int:
    """A completion estimate in whole seconds for sorting; infinite, NaN or absurd estimates
    (no live state, a broken probe) rank last instead of raising OverflowError."""
    if not math.isfinite(value) or value >= _NEVER_S:
        return _NEVER_S  # -inf too: no real estimate is below zero
    return max(round(value), 0)


def _fraction(value: float) -> float:
    return value if math.isfinite(value) else math.inf


def sort_key(
    policy: Policy, c: Ranked, est: Estimates, prefs: Preferences
) -> tuple[float | int | str, ...]:
    """Lower is better. Completion estimates are compared in whole seconds: they are coarse, and
    sub-second differences must not outrank the tie-break chain."""
    primary: Sequence[float | int]
    completion = est.completion_p90_s if policy.objective is Objective.P90 else est.completion_s
    if policy.kind is PolicyKind.SHORTEST_QUEUE:
        primary = (c.queue_depth,)
    elif policy.kind is PolicyKind.FIXED_SITE:
        primary = (0 if c.site == policy.site else 1, whole_seconds(completion))
    elif policy.goal is Goal.CHEAPEST:
        primary = (_charge(est.charge), whole_seconds(completion))
    elif policy.goal is Goal.BALANCED:
        cost = _charge(est.charge) * policy.settings.balanced_s_per_unit
        both = whole_seconds(completion) + cost if math.isfinite(cost) else math.inf
        primary = (whole_seconds(both), whole_seconds(completion))
    else:
        primary = (whole_seconds(completion),)
    ps, pp = preference_rank(prefs, c.site, c.partition)
    return (
        *primary,
        round(_fraction(est.credit_fraction), 6),
        est.waste,
        ps,
        pp,
        c.account_rank,
        c.id,
    )


def with_credit_fraction(
    key: tuple[float | int | str, ...], fraction: float
) -> tuple[float | int | str, ...]:
    """`key`, made by `sort_key`, as it reads when the estimates' credit fraction is `fraction`
    (the first field of `KEY_TAIL`; nothing before it reads the fraction)."""
    i = len(key) - len(KEY_TAIL)
    return (*key[:i], round(_fraction(fraction), 6), *key[i + 1 :])
