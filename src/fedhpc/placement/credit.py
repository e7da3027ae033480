"""Predicted charge under a site's charge model, and the budget the user allows this task there."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from fedhpc.domain.billing import live_charge
from fedhpc.domain.config import AccountConfig, Site
from fedhpc.domain.job import Shape
from fedhpc.domain.site import (
    ChargeKind,
    Credit,
    PartitionSpec,
    PartitionState,
    SiteProfile,
    SiteState,
)
from fedhpc.domain.units import finite_or_none
from fedhpc.placement.context import Ledger

__all__ = [
    "Allowance",
    "Budget",
    "Budgets",
    "Charge",
    "allowed_budget",
    "live_spec",
    "predict_charge",
]


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


def live_spec(
    profile: SiteProfile, spec: PartitionSpec, pstate: PartitionState | None
) -> PartitionSpec:
    """`spec` charging what the partition's live billing weights say, where they replace its
    profile's charge (`domain.billing.live_charge`: a charge the operator stated wins), else
    `spec` itself. Placement's index applies it once per probe; `predict_charge` then reads it."""
    if pstate is None or not pstate.billing_weights:
        return spec
    charge = live_charge(profile, spec, pstate.billing_weights)
    return spec if charge is None else spec.model_copy(update={"charge": charge})


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


@dataclass(frozen=True, slots=True)
class Allowance:
    """What bounds one (site, account)'s spending before the task's own budget and the
    ledger's claims, in the order `allowed_budget` weighs them: fixed ones, ones the account's
    spending lowers, and the site budget, which the site's spending lowers. It reads only the
    probe and the user's settings: one per (site, account) and snapshot."""

    fixed: tuple[tuple[float, str], ...]
    account: tuple[tuple[float, str], ...]
    site: tuple[float, str] | None
    broken: str | None

    @classmethod
    def of(cls, site: Site, state: SiteState | None, account: str | None) -> Allowance:
        fixed: list[tuple[float, str]] = []
        if site.user.task_budget is not None:
            fixed.append((site.user.task_budget, f"per-task ceiling {site.user.task_budget:g}"))
        row = _credit_row(state, account)
        broken = _unusable(state, row)
        if broken is not None:
            return cls((), (), None, broken)
        used_acct = (row.used or 0.0) if row else 0.0
        acct: list[tuple[float, str]] = []
        config = _account_config(site, account)
        if config is not None and config.budget is not None:
            label = f"account {account} budget {config.budget:g} - used {used_acct:g}"
            acct.append((config.budget - used_acct, label))
        if row is not None and row.budget is not None:
            label = f"account {account} allocation {row.budget:g} - used {used_acct:g}"
            acct.append((row.budget - used_acct, label))
        if row is not None and row.balance is not None:
            acct.append((row.balance, f"balance {row.balance:g}"))
        if config is not None:
            acct = _kept(acct, config, state)
        whole: tuple[float, str] | None = None
        if site.user.budget is not None:
            used_site = sum((c.used or 0.0) for c in state.credit) if state else 0.0
            label = f"site budget {site.user.budget:g} - used {used_site:g}"
            whole = (site.user.budget - used_site, label)
        return cls(tuple(fixed), tuple(acct), whole, None)

    def budget(self, task_budget: float | None, spent_account: float, spent_site: float) -> Budget:
        """The budget of a task allowed `task_budget`, after claims that spent `spent_account`
        on this account and `spent_site` on the site."""
        if self.broken is not None:
            return Budget(None, self.broken, None, unusable=self.broken)
        bounds = [] if task_budget is None else [(task_budget, f"task budget {task_budget:g}")]
        bounds += self.fixed
        bounds += ((v - spent_account, label) for v, label in self.account)
        site_remaining: float | None = None
        if self.site is not None:
            site_remaining = self.site[0] - spent_site
            bounds.append((site_remaining, self.site[1]))
        if not bounds:
            return Budget(None, "no budget or balance known", None)
        if any(not math.isfinite(b[0]) for b in bounds):  # e.g. a ledger fed a broken charge
            bad = next(label for value, label in bounds if not math.isfinite(value))
            return Budget(None, f"not a finite budget: {bad}", None, unusable=bad)
        value, label = min(bounds, key=lambda b: b[0])
        return Budget(round(max(value, 0.0), 4), label, site_remaining)


def _kept(
    bounds: list[tuple[float, str]], config: AccountConfig, state: SiteState | None
) -> list[tuple[float, str]]:
    """The account's bounds less the reserve its config keeps, and none left once its
    allocation expired (judged at the probe's time: placement reads no clock)."""
    name = config.name
    last = config.expires
    if last is not None and state is not None and state.collected_at.date() > last:
        why = (
            f"account {name}'s allocation expired on {last.isoformat()}: "
            "use another account or site, or update `expires` in your config"
        )
        return [(0.0, why)]
    if not config.reserve:
        return bounds
    keep = config.reserve
    return [
        (
            value - keep,
            f"{label} - reserve {keep:g} your config keeps on account {name}; "
            "to spend it lower `reserve`, or use goal cheapest or a smaller envelope",
        )
        for value, label in bounds
    ]


def _spent(ledger: Ledger | None, site: str, account: str | None) -> tuple[float, float]:
    if ledger is None:
        return 0.0, 0.0
    return ledger.spent.get((site, account), 0.0), ledger.site_spent(site)


def allowed_budget(
    site: Site,
    state: SiteState | None,
    account: str | None,
    task_budget: float | None,
    ledger: Ledger | None,
) -> Budget:
    """min(task budget, account budget - used, site budget - live used, balance), each less
    what the ledger's claims spent there."""
    allowance = Allowance.of(site, state, account)
    return allowance.budget(task_budget, *_spent(ledger, site.name, account))


class Budgets:
    """Each (site, account)'s `Budget` for one request as its ledger stands. What the snapshot
    and the user's settings allow is worked out once; what the ledger's claims take off is
    redone for a site after a claim there (`claimed`)."""

    __slots__ = (
        "_allowances",
        "_base",
        "_current",
        "_fractions",
        "_ledger",
        "_person",
        "_task_budget",
    )

    def __init__(
        self,
        task_budget: float | None,
        ledger: Ledger | None,
        allowances: dict[tuple[str, str | None], Allowance] | None = None,
        person: Mapping[str, tuple[float, str]] | None = None,
    ) -> None:
        """`allowances`: a cache of `Allowance`s for the same snapshot and sites, which other
        requests may share (the federation index keeps one). `person`: per site, what the
        request's person may still spend there (`person_budget`) and why."""
        self._task_budget, self._ledger = task_budget, ledger
        self._allowances = {} if allowances is None else allowances
        self._person = person or {}
        self._base: dict[str, float] = {}  # the ledger's spending per site before this request
        self._current: dict[tuple[str, str | None], Budget] = {}
        self._fractions: dict[tuple[str, tuple[str | None, ...], float], float] = {}

    def get(self, site: Site, state: SiteState | None, account: str | None) -> Budget:
        key = (site.name, account)
        got = self._current.get(key)
        if got is None:
            allowance = self._allowances.get(key)
            if allowance is None:
                allowance = self._allowances[key] = Allowance.of(site, state, account)
            got = allowance.budget(self._task_budget, *_spent(self._ledger, site.name, account))
            got = self._current[key] = self._personal(site.name, got)
        return got

    def _personal(self, name: str, got: Budget) -> Budget:
        """`got` bounded by what the person may still spend at the site, less what this
        request's own claims took there (a group's earlier children: one person's)."""
        bound = self._person.get(name)
        if bound is None or got.unusable is not None:
            return got
        left, label = bound
        if self._ledger is not None:
            spent = self._ledger.site_spent(name)
            left -= spent - self._base.setdefault(name, spent)
        if got.allowed is not None and got.allowed <= left:
            return got
        return Budget(round(max(left, 0.0), 4), label, got.site_remaining)

    def least_fraction(
        self,
        site: Site,
        state: SiteState | None,
        accounts: tuple[str | None, ...],
        charge: float,
    ) -> float:
        """The least share of any of these accounts' remaining credit (the site's, else what
        the account may spend) that `charge` takes; infinite with no account. Many partitions
        of a site share their accounts and cheapest charge: each answer is kept until a claim
        at the site."""
        name = site.name
        key = (name, accounts, charge)
        least = self._fractions.get(key)
        if least is not None:
            return least
        least, current = math.inf, self._current
        for account in accounts:
            budget = current.get((name, account)) or self.get(site, state, account)
            left = budget.site_remaining if budget.site_remaining is not None else budget.allowed
            least = min(least, round(charge / left, 6) if left and left > 0 else 0.0)
        self._fractions[key] = least
        return least

    def claimed(self, site: str) -> None:
        """A claim at `site` was added to the ledger: its budgets are redone when next asked."""
        for key in [k for k in self._current if k[0] == site]:
            del self._current[key]
        for fkey in [k for k in self._fractions if k[0] == site]:
            del self._fractions[fkey]
