"""Probe output is input too: non-finite or absurd numbers make that part of a site's data
unusable (health degraded, with the reason), never a number placement would trust."""

from __future__ import annotations

import math

from fedhpc.domain.site import Credit, Health, PartitionState, SiteState
from fedhpc.domain.units import MAX_CREDITS, MAX_MEMORY_MIB

__all__ = ["MAX_PROBE_COUNT", "sanitize_state"]

# Jobs in a queue, nodes or CPUs in a partition: beyond this a probe misread something.
MAX_PROBE_COUNT = 10**9
_COUNT_FIELDS = (
    "total_gpus",
    "free_gpus",
    "total_cpus",
    "free_cpus",
    "max_free_gpus_on_node",
    "max_free_cpus_on_node",
    "pending_jobs",
    "blocked_pending_jobs",
    "running_jobs",
    "user_pending_jobs",
    "user_running_jobs",
)


def _credit(c: Credit, reasons: list[str]) -> Credit:
    bad = [
        f"{name}={value!r}"
        for name in ("budget", "used", "balance")
        if (value := getattr(c, name)) is not None
        and (not math.isfinite(value) or abs(value) > MAX_CREDITS)
    ]
    if not bad:
        return c
    why = f"the site reported {', '.join(bad)}"
    reasons.append(f"credit of {c.account}: {why}")
    return c.model_copy(update={"used": None, "balance": None, "unusable": why})


def _partition_issue(p: PartitionState) -> str | None:
    for name in _COUNT_FIELDS:
        value = getattr(p, name)
        if not 0 <= value <= MAX_PROBE_COUNT:
            return f"partition {p.name}: {name}={value} is out of range"
    if not 0 <= p.free_memory_mib <= MAX_MEMORY_MIB * MAX_PROBE_COUNT:
        return f"partition {p.name}: free_memory_mib={p.free_memory_mib} is out of range"
    for bucket, n in (*p.nodes.model_dump().items(), *p.free_gpus_by_type.items()):
        if not 0 <= n <= MAX_PROBE_COUNT:
            return f"partition {p.name}: {bucket}={n} is out of range"
    return None


def sanitize_state(state: SiteState) -> SiteState:
    """The state with untrustworthy numbers removed: a credit row keeps its account but loses
    its live numbers (marked `unusable`, which the credit rule refuses); a partition with an
    impossible count is left out (placement then says the probe did not report it). Either
    degrades the site's health, and `error` says why."""
    reasons: list[str] = []
    credit = tuple(_credit(c, reasons) for c in state.credit)
    partitions: list[PartitionState] = []
    for p in state.partitions:
        issue = _partition_issue(p)
        if issue is None:
            partitions.append(p)
        else:
            reasons.append(f"{issue}; its data is ignored")
    latency = state.latency_s
    if latency is not None and not (math.isfinite(latency) and latency >= 0):
        latency = None
    if not reasons and latency == state.latency_s:
        return state
    update: dict[str, object] = {
        "credit": credit,
        "partitions": tuple(partitions),
        "latency_s": latency,
    }
    if reasons:
        note = "unusable probe data: " + "; ".join(reasons)
        update["error"] = f"{state.error}; {note}" if state.error else note
        if state.health is Health.OK:
            update["health"] = Health.DEGRADED
    return state.model_copy(update=update)
