"""What one placement batch shares, and how queued work is keyed within it: the batch's state
(`Batch`), siblings with equal decision inputs (`child_key`), work held alike (`unheld`,
`hold`), and sites whose missing data may still let a request fit (`missing_data`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from fedhpc.collector import Collector
from fedhpc.orchestrator.hedging import HedgePlan
from fedhpc.orchestrator.holdback import hold_key
from fedhpc.orchestrator.records import TaskRecord
from fedhpc.orchestrator.start_estimates import SchedulerAnswer
from fedhpc.placement import Category, Ledger, Outcome, Placement, Unschedulable
from fedhpc.placement.estimators import WaitHistory

__all__ = ["Batch", "child_key", "hold", "missing_data", "unheld"]

# What a probe can change: a candidate rejected only for these may fit once data arrives.
_LIVE = frozenset(
    {Category.HEALTH, Category.FRESHNESS, Category.CAPACITY, Category.USER_LIMITS, Category.CREDIT}
)


def missing_data(collector: Collector, u: Unschedulable) -> list[str]:
    """Sites whose candidates failed only on what a probe can change, while the daemon has no
    probe of the site or only a stale one: the request may fit once the data arrives."""
    out: set[str] = set()
    for c in u.trace.candidates:
        if c.feasible or c.site in out or c.site not in collector.sites:
            continue
        state = collector.latest.get(c.site)
        # Before a probe reads them (none yet, or its accounts part failed), accounts may
        # still be discovered by one, too.
        unread = state is None or "accounts" in state.unread
        live = _LIVE | {Category.AUTHORIZATION} if unread else _LIVE
        fails = [r.category for r in c.rules if r.outcome is Outcome.FAIL]
        if not fails or not all(f in live for f in fails):
            continue  # something no probe can change rules this candidate out
        if unread or Category.FRESHNESS in fails:
            out.add(c.site)
    return sorted(out)


def child_key(task: TaskRecord) -> tuple[object, ...] | None:
    """Group children with equal keys get the same decision inputs (None: not a child)."""
    if task.group_id is None:
        return None
    req = task.request
    return (
        task.group_id,
        req.envelope.model_dump_json(),
        req.policy,
        req.fixed_site,
        req.fallback,
        req.task_budget,
        task.excluded_sites,
        task.refused_sites,  # a child a scheduler refused never lends its siblings that
        req.workdir,
    )


def unheld(
    tasks: list[TaskRecord], held: dict[str, str], holds: list[TaskRecord]
) -> list[TaskRecord]:
    """The tasks not held already in this pass; the others wait with their kind's reason."""
    todo = []
    for task in tasks:
        if (key := hold_key(task)) in held:
            hold(task, held[key], holds)
        else:
            todo.append(task)
    return todo


def hold(task: TaskRecord, reason: str, holds: list[TaskRecord]) -> None:
    """The task stays queued with `reason`; written only when the reason changed."""
    if task.decision != reason:
        task.decision = reason
        holds.append(task)


@dataclass
class Batch:
    """One batch's shared state: the pass's holds (by `hold_key`), one wait history and one
    ledger of claims, the scheduler's answer, and what the batch decided so far."""

    held: dict[str, str]
    history: WaitHistory | None
    ledger: Ledger
    now: datetime
    answer: SchedulerAnswer | None = None
    holds: list[TaskRecord] = field(default_factory=list)  # to save: their reason changed
    jobs: list[tuple[TaskRecord, Placement]] = field(default_factory=list)  # to dispatch
    hedges: dict[str, HedgePlan] = field(default_factory=dict)  # task id -> its copies, note
    used: dict[str, set[str]] = field(default_factory=dict)  # group -> systems its children use
    spread: dict[str, bool] = field(default_factory=dict)  # group -> spread across systems
