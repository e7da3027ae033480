"""Evaluating one partition for one request: its rules once per level they read, sizing, and
for each feasible candidate its estimates and sort key."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import NamedTuple

from fedhpc.domain.envelope import ResourceEnvelope
from fedhpc.domain.job import Shape
from fedhpc.placement.candidates import AccountChoice, account_choices, candidate_id
from fedhpc.placement.context import CandidateContext, PartitionContext, shape_key
from fedhpc.placement.credit import Budgets, predict_charge
from fedhpc.placement.errors import EstimatorErrors, method_of
from fedhpc.placement.estimators import (
    EnvCache,
    RuntimeModel,
    SchedulerEstimates,
    WaitHistory,
    env_prep_s,
    estimate_wait,
)
from fedhpc.placement.policy import Policy, PolicyKind
from fedhpc.placement.ranking import Ranked, sort_key, waste, with_credit_fraction
from fedhpc.placement.rules import RULES, Category, Level, Outcome, RuleResult
from fedhpc.placement.sizing import Ladder, joint_shapes, size_shape
from fedhpc.placement.trace import CandidateTrace, Estimates

__all__ = ["Evaluated", "Inputs", "Known", "evaluate", "minimum_shape", "rebudget"]

# The rule table split by level, as (position in the table, function) pairs.
_SITE_RULES = tuple((i, r.partition_fn) for i, r in enumerate(RULES) if r.level is Level.SITE)
_PART_RULES = tuple((i, r.partition_fn) for i, r in enumerate(RULES) if r.level is Level.PARTITION)
_ACCOUNT_RULES = tuple((i, r.candidate_fn) for i, r in enumerate(RULES) if r.level is Level.ACCOUNT)
_SHAPE_RULES = tuple((i, r.candidate_fn) for i, r in enumerate(RULES) if r.level is Level.SHAPE)


_WALL = next(i for i, r in enumerate(RULES) if r.category is Category.WALL_TIME)
_CREDIT = next(i for i, r in enumerate(RULES) if r.category is Category.CREDIT)
_CREDIT_FN = RULES[_CREDIT].candidate_fn  # a shape-level rule: one verdict per candidate

# One partition's candidates: (feasible, rejected).
Evaluated = tuple[list[CandidateTrace], list[CandidateTrace]]

# Every slot of a candidate's row is overwritten by its rule; this only gives the row its length.
_PLACEHOLDER = tuple(RuleResult(r.category, Outcome.NOTE, "not evaluated") for r in RULES)


def _estimates(x: CandidateContext, key: str, inputs: Inputs) -> Estimates:
    p, policy = x.part, inputs.policy
    s = policy.settings
    w = estimate_wait(
        policy.wait,
        site=p.site.name,
        partition=p.spec.name,
        key=key,
        shape=x.shape,
        account=x.account,
        qos=x.qos,
        live=p.live,
        now=p.now,
        settings=s,
        history=inputs.history,
        scheduler=inputs.scheduler,
        scheduler_notes=inputs.scheduler_notes,
        errors=inputs.errors,
    )
    r, r_src = inputs.runtime.runtime(x.shape)
    e, e_src = env_prep_s(p.site.name, inputs.environment, inputs.env_cache, s)
    model = p.profile.charge_for(p.spec)
    acc = p.spec.node.accelerator
    return Estimates(
        wait_s=round(w.wait_s, 3),
        wait_p90_s=round(w.p90_s, 3),
        wait_source=w.source,
        runtime_s=round(r, 3),
        runtime_source=r_src,
        env_s=e,
        env_source=e_src,
        completion_s=round(w.wait_s + r + e, 3),
        completion_p90_s=round(w.p90_s + r + e, 3),
        charge=x.charge.amount,
        charge_unit=x.charge.unit,
        credit_fraction=_credit_fraction(x),
        waste=waste(x.shape.gpus, x.shape.nodes, acc.count if acc else 0, model.whole_node),
        wait_by=w.by_method,
        wait_band=_band(inputs.errors, p.site.name, p.spec.name, w.source, w.wait_s),
    )


def _band(
    errors: EstimatorErrors | None, site: str, partition: str, source: str, wait_s: float
) -> tuple[float, float, float] | None:
    if errors is None or not math.isfinite(wait_s):
        return None
    band = errors.band(site, partition, method_of(source), wait_s)
    return None if band is None else (round(band[0], 1), round(band[1], 1), round(band[2], 1))


def _credit_fraction(x: CandidateContext) -> float:
    """The share of the site's remaining credit (else of what the task may spend) this charge
    takes; 0 when nothing is known."""
    budget = x.budget
    remaining = budget.site_remaining if budget.site_remaining is not None else budget.allowed
    return round(x.charge.amount / remaining if remaining else 0.0, 6)


def _wall_short(x: CandidateContext, est: Estimates, margin: float) -> str | None:
    """Why this shape would be killed at its wall-time limit, or None when its requested wall
    time covers the predicted runtime plus `margin`. A runtime predicted from the envelope's
    own wall_time.min gets no margin: the envelope says that much suffices."""
    if est.runtime_source.startswith("envelope"):
        margin = 0.0
    need = est.runtime_s * (1 + margin)
    wall = x.shape.wall_time_s
    if need <= wall:
        return None
    env, cap = x.part.envelope.wall_time, x.part.spec.max_wall_s
    return (
        f"predicted runtime {est.runtime_s:.0f} s ({est.runtime_source}) + {margin:.0%} margin "
        f"exceeds the {wall} s this shape may request (envelope wall_time.max "
        f"{env.upper} s, {x.part.name} caps {cap} s)"
    )


@dataclass(frozen=True, slots=True)
class Inputs:
    """What one decision shares across its candidates: policy, estimator inputs, caches."""

    policy: Policy
    runtime: RuntimeModel
    history: WaitHistory | None
    scheduler: SchedulerEstimates | None
    scheduler_notes: Mapping[str, str] | None
    errors: EstimatorErrors | None
    env_cache: EnvCache | None
    environment: str | None
    minimum: Shape  # the envelope's minimum: the shape that explains a rejected partition
    budgets: Budgets  # per (site, account), as the ledger stands
    site_results: dict[str, list[tuple[int, RuleResult]]]  # site-level rules, per site
    partitions: dict[tuple[str, str], Known]  # per (site, partition)


class Known(NamedTuple):
    """What evaluating a partition reads that no claim changes (the snapshot, the envelope and
    the profile only): its partition and site rules, its accounts, joint sizing's steps."""

    results: tuple[tuple[int, RuleResult], ...]
    ok: bool
    choices: tuple[AccountChoice | None, ...]
    ladder: Ladder | None  # None: no joint sizing here

    @classmethod
    def of(cls, p: PartitionContext, inputs: Inputs) -> Known:
        site, policy = p.site, inputs.policy
        site_results = inputs.site_results.get(site.name)
        if site_results is None:
            site_results = [(i, fn(p)) for i, fn in _SITE_RULES if fn is not None]
            inputs.site_results[site.name] = site_results
        results = [(i, fn(p)) for i, fn in _PART_RULES if fn is not None]
        results.extend(site_results)
        ok = not any(v.failed for _, v in results)
        joint = ok and policy.joint_sizing and policy.kind is PolicyKind.BEST_FEASIBLE
        choices = tuple(account_choices(site, p.spec, p.state)) or (None,)
        return cls(tuple(results), ok, choices, Ladder(p.envelope, p.spec) if joint else None)


def minimum_shape(env: ResourceEnvelope) -> Shape:
    return Shape.model_construct(
        nodes=env.nodes.min,
        cpus=env.cpus.min,
        gpus=env.gpus.min,
        memory_mib=env.memory.min,
        wall_time_s=env.wall_time.min,
        accelerator_type=None,
    )


def _candidate(
    x: CandidateContext,
    base: list[RuleResult],
    ok_so_far: bool,
    account_rank: int,
    inputs: Inputs,
) -> CandidateTrace:
    """One candidate: its shape rules on top of the partition and account results in `base`,
    and for a feasible one its estimates and sort key."""
    p = x.part
    site, part = p.site.name, p.spec.name
    row = list(base)
    feasible = ok_so_far
    for i, fn in _SHAPE_RULES:
        if fn is not None:
            row[i] = v = fn(x)
            feasible = feasible and not v.failed
    key = shape_key(x.shape)
    cid = candidate_id(site, part, x.account, key)
    depth = p.live.pending if p.live else None
    if not feasible:
        return CandidateTrace(cid, site, part, x.account, x.qos, x.shape, depth, False, tuple(row))
    est = _estimates(x, key, inputs)
    short = _wall_short(x, est, inputs.policy.settings.wall_margin)
    if short is not None:
        row[_WALL] = RuleResult(Category.WALL_TIME, Outcome.FAIL, short)
        return CandidateTrace(cid, site, part, x.account, x.qos, x.shape, depth, False, tuple(row))
    ranked = Ranked(cid, site, part, account_rank, depth or 0)
    sort = sort_key(inputs.policy, ranked, est, p.envelope.preferences)
    return CandidateTrace(
        cid, site, part, x.account, x.qos, x.shape, depth, True, tuple(row), est, sort
    )


def evaluate(p: PartitionContext, inputs: Inputs) -> Evaluated:
    """Every candidate of one partition. Rules run once per level they read: partition rules
    once, account rules once per account, shape rules per shape. A partition or account that
    fails as a whole is explained by one candidate, not one per shape: at the envelope's minimum
    for a partition, at the paper's shape for an account. Returns (feasible, rejected)."""
    site, spec, live, policy = p.site, p.spec, p.live, inputs.policy
    feasible: list[CandidateTrace] = []
    rejected: list[CandidateTrace] = []
    known = inputs.partitions.get((site.name, spec.name))
    if known is None:
        known = inputs.partitions[(site.name, spec.name)] = Known.of(p, inputs)
    part_results, part_ok, choices = known.results, known.ok, known.choices
    shapes = None
    if known.ladder is not None:
        limit = policy.settings.max_shapes
        shapes = joint_shapes(p.envelope, spec, live, limit=limit, ladder=known.ladder)
    if shapes:
        paper = shapes[0]
    else:
        paper = size_shape(p.envelope, spec, live) if part_ok else inputs.minimum
    base = list(_PLACEHOLDER)
    for i, v in part_results:
        base[i] = v
    for choice in choices:
        acct = choice.name if choice else None
        qos = (choice.qos if choice else None) or spec.default_qos
        budget = inputs.budgets.get(site, p.state, acct)
        first = CandidateContext(
            p, acct, qos, paper, predict_charge(p.profile, spec, paper), budget
        )
        acct_ok = True
        for i, fn in _ACCOUNT_RULES:
            if fn is not None:
                base[i] = v = fn(first)
                acct_ok = acct_ok and not v.failed
        for shape in shapes if (shapes and acct_ok) else (paper,):
            x = (
                first
                if shape is paper
                else CandidateContext(
                    p, acct, qos, shape, predict_charge(p.profile, spec, shape), budget
                )
            )
            rank = choice.rank if choice else 0
            trace = _candidate(x, base, part_ok and acct_ok, rank, inputs)
            (feasible if trace.feasible else rejected).append(trace)
            if not part_ok:
                break  # one candidate explains a partition that fails as a whole
        if not part_ok:
            break
    return feasible, rejected


def rebudget(p: PartitionContext, before: Evaluated, inputs: Inputs) -> Evaluated | None:
    """`before`, this partition's evaluation, after claims elsewhere on its site changed only
    what the user may still spend there. The budget is read by the credit rule and the credit
    fraction (and so the sort key) alone: those are redone, the rest is kept. None when a
    candidate's credit verdict changes (feasibility, and with it the candidates, may change):
    the partition must be evaluated again."""
    assert _CREDIT_FN is not None
    spec = p.spec
    after: Evaluated = ([], [])
    for c in (*before[0], *before[1]):
        x = CandidateContext(
            p,
            c.account,
            c.qos,
            c.shape,
            predict_charge(p.profile, spec, c.shape),
            inputs.budgets.get(p.site, p.state, c.account),
        )
        verdict, was = _CREDIT_FN(x), c.rules[_CREDIT]
        if verdict.failed != was.failed:
            return None
        rules = c.rules
        if verdict != was:
            rules = (*rules[:_CREDIT], verdict, *rules[_CREDIT + 1 :])
        if c.estimates is None or c.key is None:  # rejected: only its credit reason changes
            after[1].append(c if rules is c.rules else replace(c, rules=rules))
            continue
        fraction = _credit_fraction(x)
        if fraction == c.estimates.credit_fraction and rules is c.rules:
            after[0].append(c)
            continue
        after[0].append(
            replace(
                c,
                rules=rules,
                estimates=replace(c.estimates, credit_fraction=fraction),
                key=with_credit_fraction(c.key, fraction),
            )
        )
    return after
