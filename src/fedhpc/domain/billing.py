"""What a partition charges from its scheduler's billing weights (Slurm `TRESBillingWeights`),
and which charge wins: an operator's stated charge, else the live weights, else the site's."""

from __future__ import annotations

from fedhpc.domain.site import ChargeKind, ChargeModel, NodeShape, PartitionSpec, SiteProfile

__all__ = ["BillingWeights", "billed_charge", "billing_per_hour", "gpu_weight", "live_charge"]

# (TRES, weight per unit-hour), memory per GiB, sorted by TRES; empty: the partition sets none.
BillingWeights = tuple[tuple[str, float], ...]


def billing_per_hour(
    weights: BillingWeights,
    *,
    cpus: int,
    memory_mib: int,
    gpus: int,
    nodes: int,
    gpu_type: str | None = None,
) -> float:
    """Billing units one hour of the allocation costs: the weighted sum of its TRES (Slurm's
    default; PriorityFlags=MAX_TRES is not modelled). GPUs are billed once, at one weight
    (`gpu_weight`); TRES without a weight cost nothing."""
    per_node = gpu_weight(weights, gpu_type) * gpus
    for tres, w in weights:
        t = tres.lower()
        if t == "cpu":
            per_node += w * cpus
        elif t == "mem":
            per_node += w * memory_mib / 1024.0
    nodes_w = dict(weights).get("Node", 0.0)
    return nodes * (per_node + nodes_w)


def gpu_weight(weights: BillingWeights, gpu_type: str | None) -> float:
    """The one weight a GPU of `gpu_type` is billed at: `GRES/gpu:TYPE` for its type, else
    `GRES/gpu`, else (type unknown) the only typed weight there is; 0 without any. A
    partition that weighs both `GRES/gpu` and `GRES/gpu:TYPE` states one price twice, and
    summing them billed each GPU twice (issue 42)."""
    generic: float | None = None
    typed: dict[str, float] = {}
    for tres, w in weights:
        t = tres.lower()
        if t == "gres/gpu":
            generic = w
        elif t.startswith("gres/gpu:"):
            typed[t.removeprefix("gres/gpu:")] = w
    if gpu_type is not None and gpu_type.lower() in typed:
        return typed[gpu_type.lower()]
    if generic is not None:
        return generic
    if gpu_type is None and len(typed) == 1:
        return next(iter(typed.values()))
    return 0.0


def billed_charge(
    node: NodeShape, weights: BillingWeights, *, unit: str = "SU", whole_node: bool = False
) -> ChargeModel | None:
    """The charge of a partition of `node`s billed at `weights`: a whole node's billing units
    per hour shared over its GPUs (gpu-hours) or, without GPUs, its cores (core-hours). None
    when the weights bill such a node nothing."""
    if not weights:
        return None
    acc = node.accelerator
    gpus = acc.count if acc else 0
    per_node = billing_per_hour(
        weights,
        cpus=node.cpus,
        memory_mib=node.memory_mib,
        gpus=gpus,
        nodes=1,
        gpu_type=acc.gres_type if acc else None,
    )
    units = gpus or node.cpus
    if per_node <= 0 or units <= 0:
        return None
    return ChargeModel(
        kind=ChargeKind.GPU_HOURS if gpus else ChargeKind.CORE_HOURS,
        rate=round(per_node / units, 4),
        unit=unit,
        whole_node=whole_node,
        follow_scheduler=True,
    )


def live_charge(
    profile: SiteProfile, spec: PartitionSpec, weights: BillingWeights
) -> ChargeModel | None:
    """The charge the partition's live billing weights replace its profile's with, or None
    when the profile's stands. Precedence: a charge the operator stated in the profile (the
    partition's, else the site's) wins; one marked `follow_scheduler` (what discovery writes:
    its reading of the weights, or its guess) yields to the weights the daemon read last; no
    weights, no change."""
    stated = profile.charge_for(spec)
    if not stated.follow_scheduler:
        return None
    live = billed_charge(spec.node, weights, unit=stated.unit, whole_node=stated.whole_node)
    return None if live is None or live == stated else live
