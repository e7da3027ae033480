"""The placement goal: fastest, cheapest or balanced changes which feasible candidate
best-feasible picks, by each candidate's estimated charge; the trace says so (pure)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pydantic import ValidationError

from fedhpc.domain import ChargeKind, ChargeModel, ResourceSnapshot
from fedhpc.domain.config import Site, UserConfig
from fedhpc.ops.tasks import SubmitTaskRequest
from fedhpc.orchestrator.planner import brief, summary
from fedhpc.placement import (
    Goal,
    Outcome,
    Placement,
    PlacementInputs,
    Policy,
    PolicyKind,
    Settings,
    Unschedulable,
    place,
    place_group,
)
from tests.unit.test_placement_world import NOW, cpu_partition, env, profile, site, snapshot, state

# "quick" starts now and charges 10 per core-hour; "thrifty" has ten jobs queued ahead (the
# paper estimator: 10 x 120 s) and charges 1.
QUICK = profile(
    "quick", cpu_partition("cpu"), charge=ChargeModel(kind=ChargeKind.CORE_HOURS, rate=10)
)
THRIFTY = profile(
    "thrifty", cpu_partition("cpu"), charge=ChargeModel(kind=ChargeKind.CORE_HOURS, rate=1)
)
ONE_CPU_HOUR = env(cpus=1, wall_time="1h")


def world() -> tuple[dict[str, Site], ResourceSnapshot]:
    sites = {p.name: site(p) for p in (QUICK, THRIFTY)}
    busy = {"pending_jobs": 10, "free_cpus": 0, "max_free_cpus_on_node": 0}
    return sites, snapshot(state(QUICK), state(THRIFTY, cpu=busy))


def placed(decision: Placement | Unschedulable) -> Placement:
    assert isinstance(decision, Placement), getattr(decision, "hint", decision)
    return decision


def pick(policy: Policy) -> Placement:
    sites, snap = world()
    return placed(place(ONE_CPU_HOUR, PlacementInputs(snap, sites, policy, now=NOW)))


def test_fastest_is_the_default_and_takes_the_earliest_completion_whatever_it_charges() -> None:
    assert Policy().goal is Goal.FASTEST
    p = pick(Policy())
    assert p.site == "quick"
    assert p.estimates.charge > pick(Policy(goal=Goal.CHEAPEST)).estimates.charge


def test_cheapest_takes_the_least_charge_and_the_trace_shows_each_candidates_charge() -> None:
    p = pick(Policy(goal=Goal.CHEAPEST))
    assert p.site == "thrifty"
    assert p.trace.key_fields[0] == "charge"
    charges = {c.site: c.estimates.charge for c in p.trace.candidates if c.estimates is not None}
    assert charges["thrifty"] < charges["quick"]


@pytest.mark.parametrize(("per_unit_s", "winner"), [(3600.0, "thrifty"), (60.0, "quick")])
def test_balanced_weighs_a_unit_of_charge_as_so_many_seconds(
    per_unit_s: float, winner: str
) -> None:
    # quick: ~10 s + 10 units; thrifty: ~1,200 s + 1 unit. At an hour a unit the saving of 9
    # units wins; at a minute a unit the 20 minutes saved win.
    settings = Settings(balanced_s_per_unit=per_unit_s)
    p = pick(Policy(goal=Goal.BALANCED, settings=settings))
    assert p.site == winner
    assert "charge" in p.trace.key_fields[0]


def test_equal_charges_fall_back_to_the_earliest_completion() -> None:
    sites = {
        p.name: site(p) for p in (QUICK, profile("twin", *QUICK.partitions, charge=QUICK.charge))
    }
    busy = {"pending_jobs": 10, "free_cpus": 0, "max_free_cpus_on_node": 0}
    snap = snapshot(state(QUICK, cpu=busy), state(sites["twin"].profile))
    inputs = PlacementInputs(snap, sites, Policy(goal=Goal.CHEAPEST), now=NOW)
    assert placed(place(ONE_CPU_HOUR, inputs)).site == "twin"


def test_the_goal_never_overrides_a_fixed_site_or_the_shortest_queue() -> None:
    fixed = Policy(kind=PolicyKind.FIXED_SITE, site="quick", goal=Goal.CHEAPEST)
    assert pick(fixed).site == "quick"
    shortest = Policy(kind=PolicyKind.SHORTEST_QUEUE, goal=Goal.CHEAPEST)
    assert pick(shortest).site == "quick"


def test_a_group_under_cheapest_places_every_child_on_the_cheaper_site() -> None:
    sites, snap = world()
    inputs = PlacementInputs(snap, sites, Policy(goal=Goal.CHEAPEST), now=NOW)
    decisions = place_group([ONE_CPU_HOUR] * 3, inputs)
    assert [placed(d).site for d in decisions] == ["thrifty"] * 3


def test_the_same_inputs_give_the_same_pick_under_every_goal() -> None:
    for goal in Goal:
        a, b = pick(Policy(goal=goal)), pick(Policy(goal=goal))
        assert (a.site, a.trace.key_fields) == (b.site, b.trace.key_fields)


def test_the_goal_is_typed_wherever_it_is_given() -> None:
    assert ONE_CPU_HOUR.preferences.goal is None
    assert env(cpus=1, preferences={"goal": "cheapest"}).preferences.goal == "cheapest"
    assert UserConfig().goal == "fastest"
    assert UserConfig.model_validate({"goal": "balanced"}).goal == "balanced"
    req = SubmitTaskRequest(command=("true",), envelope=ONE_CPU_HOUR, goal=Goal.CHEAPEST)
    assert req.goal is Goal.CHEAPEST
    for bad in (
        lambda: env(cpus=1, preferences={"goal": "free"}),
        lambda: UserConfig.model_validate({"goal": "slowest"}),
        lambda: SubmitTaskRequest.model_validate(
            {"command": ["true"], "envelope": {}, "goal": "cheap"}
        ),
    ):
        with pytest.raises(ValidationError):
            bad()


def _refusal(decision: Placement | Unschedulable, where: str) -> str:
    trace = decision.trace
    (c,) = [c for c in trace.candidates if c.site == where]
    failed = [r.reason for r in c.rules if r.outcome is Outcome.FAIL]
    assert failed, c
    return failed[0]


def test_a_charge_that_would_breach_the_accounts_reserve_is_refused_with_what_to_do() -> None:
    sites, snap = world()
    # 10 credits, 9.5 kept: the 1-credit core-hour on thrifty no longer fits, quick's 10 neither.
    kept = {"name": "proj", "budget": 10.0, "reserve": 9.5}
    sites = {n: site(s.profile, accounts=[kept]) for n, s in sites.items()}
    decision = place(
        ONE_CPU_HOUR, PlacementInputs(snap, sites, Policy(goal=Goal.CHEAPEST), now=NOW)
    )
    assert isinstance(decision, Unschedulable)
    why = _refusal(decision, "thrifty")
    assert "reserve 9.5" in why and "lower `reserve`" in why, why
    # A reserve the charge leaves intact changes nothing.
    sites = {n: site(s.profile, accounts=[{**kept, "reserve": 5.0}]) for n, s in sites.items()}
    inputs = PlacementInputs(snap, sites, Policy(goal=Goal.CHEAPEST), now=NOW)
    assert placed(place(ONE_CPU_HOUR, inputs)).site == "thrifty"


def test_an_expired_allocation_is_charged_nothing_and_the_reason_names_its_date() -> None:
    sites, snap = world()
    old = {"name": "proj", "budget": 100.0, "expires": "2001-01-31"}
    sites = {**sites, "thrifty": site(THRIFTY, accounts=[old])}
    p = placed(
        place(ONE_CPU_HOUR, PlacementInputs(snap, sites, Policy(goal=Goal.CHEAPEST), now=NOW))
    )
    assert p.site == "quick"
    assert "expired on 2001-01-31" in _refusal(p, "thrifty")


def test_the_decision_line_names_the_goal_where_it_ranked_and_the_charge() -> None:
    cheap = summary(pick(Policy(goal=Goal.CHEAPEST)))
    assert cheap.startswith("thrifty/cpu (best-feasible, cheapest):"), cheap
    assert "charge 1 SU" in cheap, cheap
    fast = summary(pick(Policy()))
    assert fast.startswith("quick/cpu (best-feasible):") and "charge 10 SU" in fast, fast
    fixed = Policy(kind=PolicyKind.FIXED_SITE, site="quick", goal=Goal.CHEAPEST)
    assert summary(pick(fixed)).startswith("quick/cpu (fixed-site):")


def test_the_agents_line_names_the_goal_only_when_not_the_default_and_keeps_the_estimates() -> None:
    """The answer's decision (beside its site and partition): the whole line stays the
    provenance's; the agent's drops where (the answer's fields say it), the candidates and the
    wait source's detail, never the estimates, whose estimate the wait is, or the charge."""
    fast, cheap = pick(Policy()), pick(Policy(goal=Goal.CHEAPEST))
    line = brief(fast)
    assert line.startswith("est. wait ") and " + run " in line, line
    assert line.endswith(", 10 SU") and "feasible" not in line and "quick" not in line, line
    source = fast.estimates.wait_source.split(";")[0].strip()
    assert f"({source}) + run" in line and len(line) < len(summary(fast)) / 2
    why = "paper:free-slots=512; no scheduler estimate: the scheduler did not answer"
    told = fast.model_copy(update={"estimates": replace(fast.estimates, wait_source=why)})
    assert "(paper:free-slots=512) + run" in brief(told) and why in summary(told)
    assert brief(cheap).startswith("best-feasible, cheapest: est. wait "), brief(cheap)
    fixed = Policy(kind=PolicyKind.FIXED_SITE, site="quick")
    assert brief(pick(fixed)).startswith("fixed-site: est. wait ")
