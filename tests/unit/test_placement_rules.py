"""Every rule category has a passing and a failing case (table-driven), plus soft notes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from fedhpc.domain import (
    ChargeKind,
    ChargeModel,
    ContainerSupport,
    Credit,
    Health,
    ResourceEnvelope,
    Shape,
)
from fedhpc.domain.config import Site
from fedhpc.placement import RULES, Category, Outcome, Settings
from fedhpc.placement.context import CandidateContext, Live, PartitionContext
from fedhpc.placement.credit import allowed_budget, predict_charge
from fedhpc.placement.sizing import size_shape
from tests.unit.test_placement_world import (
    NOW,
    cpu_partition,
    env,
    gpu_partition,
    profile,
    site,
    state,
)

A100 = gpu_partition("a100", max_wall_s=4 * 3600, max_jobs_per_user=2, account_suffix="-gpu")
CPU = cpu_partition("cpu")
DEBUG = cpu_partition("debug")
ALPHA = profile("alpha", A100, CPU, DEBUG, blocked_partitions=("debug",), min_refresh_s=60)


@dataclass
class Case:
    """One row: a category, what to change from the default world, the expected outcome."""

    category: Category
    name: str
    expect: Outcome
    envelope: ResourceEnvelope = field(default_factory=lambda: env(gpus=(1, 4), cpus=8))
    partition: str = "a100"
    site_kw: dict[str, Any] = field(default_factory=dict)
    state_kw: dict[str, Any] = field(default_factory=dict)
    profile_kw: dict[str, Any] = field(default_factory=dict)
    account: str | None = "proj-gpu"
    qos: str | None = None
    shape: Shape | None = None
    task_budget: float | None = None
    drop_state: bool = False
    reason_has: str = ""


def _evaluate(case: Case) -> tuple[Outcome, str]:
    prof = ALPHA.model_copy(update=case.profile_kw) if case.profile_kw else ALPHA
    s: Site = site(prof, **case.site_kw)
    st_kw = {"accounts": ("proj-gpu", "proj-cpu"), **case.state_kw}
    st = None if case.drop_state else state(prof, **st_kw)
    spec = prof.partition(case.partition)
    ps = st.partition(case.partition) if st else None
    live = Live.of(prof.name, ps, None) if ps else None
    p = PartitionContext(
        case.envelope, s, spec, st, ps, live, NOW, Settings(), None, case.task_budget
    )
    shape = case.shape or size_shape(case.envelope, spec, live)
    budget = allowed_budget(s, st, case.account, case.task_budget, None)
    x = CandidateContext(
        p, case.account, case.qos, shape, predict_charge(prof, spec, shape), budget
    )
    rule = next(r for r in RULES if r.category is case.category)
    result = rule(x)
    return result.outcome, result.reason


P, F, N = Outcome.PASS, Outcome.FAIL, Outcome.NOTE
CASES = [
    Case(Category.HEALTH, "ok site passes", P),
    Case(Category.HEALTH, "offline site fails", F, state_kw={"health": Health.OFFLINE}),
    Case(Category.HEALTH, "missing probe fails", F, drop_state=True, reason_has="no probe"),
    Case(Category.HEALTH, "degraded site is a note", N, state_kw={"health": Health.DEGRADED}),
    Case(Category.HEALTH, "partition down fails", F, state_kw={"a100": {"available": False}}),
    Case(Category.FRESHNESS, "a 5 s old probe passes", P),
    Case(Category.FRESHNESS, "a 1 h old probe fails", F, state_kw={"age_s": 3600}),
    Case(Category.FRESHNESS, "a 3 min old probe is a note", N, state_kw={"age_s": 180}),
    Case(Category.AUTHORIZATION, "an associated account passes", P),
    Case(
        Category.AUTHORIZATION,
        "an account the scheduler does not list fails",
        F,
        account="other-gpu",
        reason_has="no association",
    ),
    Case(
        Category.AUTHORIZATION,
        "an account without the partition's suffix fails",
        F,
        account="proj-cpu",
        reason_has="-gpu",
    ),
    Case(Category.AUTHORIZATION, "no account at all fails", F, account=None),
    Case(Category.SITE_POLICY, "an open partition passes", P),
    Case(
        Category.SITE_POLICY,
        "a blocked partition fails",
        F,
        partition="debug",
        envelope=env(cpus=4),
        account="proj-cpu",
    ),
    Case(
        Category.SITE_POLICY,
        "an excluded site fails",
        F,
        envelope=env(gpus=1, sites_exclude=("alpha",)),
    ),
    Case(
        Category.ARCHITECTURE,
        "an allowed architecture passes",
        P,
        envelope=env(gpus=1, architectures=("x86_64",)),
    ),
    Case(
        Category.ARCHITECTURE,
        "another architecture fails",
        F,
        envelope=env(gpus=1, architectures=("aarch64",)),
    ),
    Case(
        Category.ACCELERATOR,
        "an allowed type passes",
        P,
        envelope=env(gpus=1, accelerator_types=("a100",)),
    ),
    Case(
        Category.ACCELERATOR,
        "another type fails",
        F,
        envelope=env(gpus=1, accelerator_types=("h100",)),
    ),
    Case(
        Category.ACCELERATOR,
        "200 GiB per accelerator fails",
        F,
        envelope=env(gpus=1, min_accelerator_memory_gib=200),
        reason_has="200",
    ),
    Case(Category.ACCELERATOR, "a GPU task on a CPU partition fails", F, partition="cpu"),
    Case(Category.ACCELERATOR, "a CPU task on a GPU partition fails", F, envelope=env(cpus=4)),
    Case(Category.CAPACITY, "a fitting shape passes", P),
    Case(Category.CAPACITY, "8 GPUs on a 4-GPU node fails", F, envelope=env(gpus=8)),
    Case(Category.CAPACITY, "more nodes than allowed fails", F, envelope=env(gpus=1, nodes=2)),
    Case(Category.CAPACITY, "no usable node fails", F, state_kw={"a100": {"nodes": {"down": 2}}}),
    Case(Category.WALL_TIME, "within the cap passes", P, envelope=env(gpus=1, wall_time="2h")),
    Case(Category.WALL_TIME, "above the cap fails", F, envelope=env(gpus=1, wall_time="5h")),
    Case(Category.CONTAINER, "no container passes", P),
    Case(
        Category.CONTAINER,
        "a supported runtime passes",
        P,
        envelope=env(gpus=1, container={"image": "x.sif"}),
    ),
    Case(
        Category.CONTAINER,
        "a site without runtimes fails",
        F,
        envelope=env(gpus=1, container={"image": "x.sif"}),
        profile_kw={"containers": ContainerSupport()},
    ),
    Case(Category.USER_LIMITS, "under the job limit passes", P),
    Case(
        Category.USER_LIMITS,
        "at the job limit fails",
        F,
        state_kw={"a100": {"user_running_jobs": 1, "user_pending_jobs": 1}},
    ),
    Case(
        Category.USER_LIMITS,
        "some jobs already is a note",
        N,
        state_kw={"a100": {"user_running_jobs": 1}},
    ),
    Case(
        Category.USER_LIMITS,
        "a QoS the partition does not offer fails",
        F,
        qos="long",
        profile_kw={"partitions": (A100.model_copy(update={"qos": ("normal",)}), CPU, DEBUG)},
    ),
    Case(Category.CREDIT, "a charge within the budget passes", P, task_budget=100.0),
    Case(
        Category.CREDIT,
        "a charge above the task budget fails",
        F,
        task_budget=0.1,
        reason_has="out of credit",
    ),
    Case(
        Category.CREDIT,
        "a spent site budget fails",
        F,
        site_kw={"budget": 10.0},
        state_kw={"credit": (Credit(account="proj-gpu", used=10.0),)},
        reason_has="site budget",
    ),
    Case(
        Category.CREDIT,
        "an empty balance fails",
        F,
        state_kw={"credit": (Credit(account="proj-gpu", balance=0.5),)},
    ),
    Case(Category.CREDIT, "no budget known is a note", N),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.category.value}: {c.name}")
def test_rule_gives_the_expected_outcome(case: Case) -> None:
    outcome, reason = _evaluate(case)
    assert outcome is case.expect, reason
    if case.reason_has:
        assert case.reason_has in reason
    if outcome is not Outcome.PASS:
        assert reason, "every failure and note carries a reason"


def test_every_rule_category_has_a_passing_and_a_failing_case() -> None:
    for cat in Category:
        outcomes = {c.expect for c in CASES if c.category is cat}
        assert {Outcome.PASS, Outcome.FAIL} <= outcomes, cat


def test_rule_table_lists_every_category_once_in_trace_order() -> None:
    assert [r.category for r in RULES] == list(Category)


def test_staleness_bound_follows_min_refresh() -> None:
    slow = Case(
        Category.FRESHNESS, "", P, state_kw={"age_s": 500}, profile_kw={"min_refresh_s": 120}
    )
    assert _evaluate(slow)[0] is Outcome.NOTE  # 500 s < 5 x 120 s
    fast = Case(Category.FRESHNESS, "", P, state_kw={"age_s": 500}, profile_kw={"min_refresh_s": 2})
    assert _evaluate(fast)[0] is Outcome.FAIL  # 500 s > max(60 s, 5 x 2 s)
    future = Case(Category.FRESHNESS, "", P, state_kw={"age_s": -3600})
    assert "clock skew" in _evaluate(future)[1]


def test_whole_node_charge_bills_every_core_of_each_node() -> None:
    whole = cpu_partition(
        "w", cpus=128, charge=ChargeModel(kind=ChargeKind.CORE_HOURS, whole_node=True)
    )
    p = profile("w", whole)
    charge = predict_charge(p, whole, Shape(cpus=4, nodes=2, wall_time_s=1800))
    assert charge.amount == 128 * 2 * 0.5
    gpu = predict_charge(ALPHA, A100, Shape(gpus=2, cpus=8, wall_time_s=7200))
    assert gpu.amount == 4.0  # gpu-hours: 2 GPUs x 2 h
    node = profile("n", A100, charge=ChargeModel(kind=ChargeKind.NODE_HOURS, rate=2.0))
    assert predict_charge(node, A100, Shape(gpus=1, nodes=1, wall_time_s=3600)).amount == 2.0
