"""Predicted charge under a site's charge model, and the budget the user allows this task there."""

from __future__ import annotations

import math
from dataclasses import dataclass

from fedhpc.domain.config import AccountConfig, Site
from fedhpc.domain.job import Shape
from fedhpc.domain.site import ChargeKind, Credit, PartitionSpec, SiteProfile, SiteState
from fedhpc.domain.units import finite_or_none
from fedhpc.placement.context import Ledger

__all__ = ["Budget", "Charge", "allowed_budget", "predict_charge"]


@dataclass(frozen=True, slots=True)
class Charge:
    """Worst-case charge: the whole granted wall time is billed."""

    amount: float
    units: float
    kind: ChargeKind
    rate: float
    hours: float
    unit: str

    def explain(self) -> str:
        return (
            f"{self.amount:g} {self.unit} ({self.units:g} {self.kind.value.removesuffix('s')}s"
            f" x {self.hours:g} h x rate {self.rate:g})"
        )


def predict_charge(profile: SiteProfile, spec: PartitionSpec, shape: Shape) -> Charge:
    """units x hours x rate, where whole-node charging bills the node's full CPUs or GPUs."""
    model = profile.charge_for(spec)
    node = spec.node
    acc_count = node.accelerator.count if node.accelerator else 0
    if model.kind is ChargeKind.NODE_HOURS:
        units = float(shape.nodes)
    elif model.kind is ChargeKind.GPU_HOURS:
        per_node = acc_count if model.whole_node else shape.gpus
        units = float(per_node * shape.nodes)
    else:
        per_node = node.cpus if model.whole_node else shape.cpus
        units = float(per_node * shape.nodes)
    hours = shape.wall_time_s / 3600.0
    amount = round(units * hours * model.rate, 4)
    return Charge(amount, units, model.kind, model.rate, round(hours, 4), model.unit)


@dataclass(frozen=True, slots=True)
class Budget:
    """The tightest known bound on what this task may spend; None = nothing known."""

    allowed: float | None
    binding: str  # which bound decided, for the trace
    site_remaining: float | None  # for the credit-fraction tie-break
    unusable: str | None = None  # the site's numbers cannot be trusted: the credit rule fails


def _account_config(site: Site, account: str | None) -> AccountConfig | None:
    return next((a for a in site.user.accounts if a.name == account), None)


def _credit_row(state: SiteState | None, account: str | None) -> Credit | None:
    if state is None or account is None:
        return None
    return next((c for c in state.credit if c.account == account), None)


def _unusable(state: SiteState | None, row: Credit | None) -> str | None:
    """Why this site's credit numbers cannot decide anything, or None. NaN compares false with
    everything, so a NaN usage once looked "within budget"; any non-finite number refuses."""
    if row is not None and row.unusable:
        return f"credit data for account {row.account} is unusable: {row.unusable}"
    rows = state.credit if state is not None else ()
    for c in rows:
        for name in ("budget", "used", "balance"):
            value = getattr(c, name)
            if value is not None and finite_or_none(value) is None:
                return f"the site reported {name}={value} for account {c.account}"
    return None


def allowed_budget(
    site: Site,
    state: SiteState | None,
    account: str | None,
    task_budget: float | None,
    ledger: Ledger | None,
) -> Budget:
    """min(task budget, account budget - used, site budget - live used, balance)."""
    bounds: list[tuple[float, str]] = []
    spent_acct = ledger.spent.get((site.name, account), 0.0) if ledger else 0.0
    spent_site = ledger.site_spent(site.name) if ledger else 0.0
    if task_budget is not None:
        bounds.append((task_budget, f"task budget {task_budget:g}"))
    if site.user.task_budget is not None:
        bounds.append((site.user.task_budget, f"per-task ceiling {site.user.task_budget:g}"))
    row = _credit_row(state, account)
    broken = _unusable(state, row)
    if broken is not None:
        return Budget(None, broken, None, unusable=broken)
    used_acct = (row.used or 0.0) if row else 0.0
    acct = _account_config(site, account)
    if acct is not None and acct.budget is not None:
        left = acct.budget - used_acct - spent_acct
        bounds.append((left, f"account {account} budget {acct.budget:g} - used {used_acct:g}"))
    if row is not None and row.budget is not None:
        left = row.budget - used_acct - spent_acct
        bounds.append((left, f"account {account} allocation {row.budget:g} - used {used_acct:g}"))
    if row is not None and row.balance is not None:
        bounds.append((row.balance - spent_acct, f"balance {row.balance:g}"))
    site_remaining: float | None = None
    if site.user.budget is not None:
        used_site = sum((c.used or 0.0) for c in state.credit) if state else 0.0
        site_remaining = site.user.budget - used_site - spent_site
        bounds.append((site_remaining, f"site budget {site.user.budget:g} - used {used_site:g}"))
    if not bounds:
        return Budget(None, "no budget or balance known", None)
    if any(not math.isfinite(b[0]) for b in bounds):  # e.g. a ledger fed a broken charge
        bad = next(label for value, label in bounds if not math.isfinite(value))
        return Budget(None, f"not a finite budget: {bad}", None, unusable=bad)
    value, label = min(bounds, key=lambda b: b[0])
    return Budget(round(max(value, 0.0), 4), label, site_remaining)
