"""A per-person budget at a site (`sites.X.person_budget`, service mode): each person's work
there, what their ended jobs used plus their live jobs' whole wall time, stays under it. One
person's spending never bounds another's, and work nobody signed in for is not bounded. Placement
on the real store and real placement; the sites' adapters accept every job (`_Site`)."""

from __future__ import annotations

from typing import Any, cast

from fedhpc.collector import Collector
from fedhpc.domain import ChargeKind, ChargeModel, JobState
from fedhpc.orchestrator.service import Orchestrator
from fedhpc.placement import Placement, PlacementInputs, Policy, PolicyKind, Unschedulable
from fedhpc.placement.group import place_group
from fedhpc.store import Store
from tests.unit.test_placement_world import NOW, cpu_partition, env, profile, site, snapshot, state
from tests.unit.test_slow_site import _Site
from tests.unit.test_submit_accept import Clock, _req

CORE = ChargeModel(kind=ChargeKind.CORE_HOURS)  # 1 SU per core-hour
ENV = env(cpus=4, wall_time="1h")  # 4 SU at alpha, at worst
ALICE, BOB = "https://idp.example.org|alice", "https://idp.example.org|bob"


def _world(store: Store, budget: float) -> Orchestrator:
    """alpha (idle, capped per person) and beta (busy: a long wait, no cap)."""
    alpha = site(profile("alpha", cpu_partition("cpu"), charge=CORE), person_budget=budget)
    beta = site(profile("beta", cpu_partition("cpu"), charge=CORE))
    busy = {"free_cpus": 0, "max_free_cpus_on_node": 0, "pending_jobs": 40, "running_jobs": 4}
    clock = Clock()
    collector = Collector({"alpha": alpha, "beta": beta}, {}, store, clock=clock)
    collector.latest = {"alpha": state(alpha.profile), "beta": state(beta.profile, cpu=busy)}
    collector.ready.set()
    adapters = {"alpha": cast(Any, _Site(alpha)), "beta": cast(Any, _Site(beta))}
    return Orchestrator(store, collector, adapters, clock=clock, retry_window_s=120)


async def _place(o: Orchestrator, owner: str | None, n: int, *, pinned: bool) -> list[Any]:
    """`n` new tasks of `owner` (pinned to alpha, or free to go anywhere), placed."""
    policy = {"policy": PolicyKind.FIXED_SITE, "fixed_site": "alpha"} if pinned else {}
    handles = []
    for _ in range(n):
        k = await o.book.store.count("tasks")
        req = _req(command=("echo", str(k)), envelope=ENV, **policy)
        handles.append(await o.intake.submit_task(req, wait_s=0, owner=owner))
    await o.place_queued()
    return [await o.book.load_task(h.task_id) for h in handles]


async def test_a_person_past_their_budget_is_refused_where_others_are_not(store: Store) -> None:
    o = _world(store, budget=10.0)  # two of alice's 4-SU jobs fit, not three
    first = await _place(o, ALICE, 2, pinned=True)
    assert [t.state for t in first] == [JobState.SUBMITTED] * 2
    (third,) = await _place(o, ALICE, 1, pinned=True)
    assert third.state is JobState.UNSCHEDULABLE
    assert "per-person budget 10 - 8 your jobs there used or hold" in third.reasons[0]
    assert "sites.alpha.person_budget" in third.reasons[0]
    assert "wait for your running jobs to end" in third.reasons[0]  # not "raise your config"
    (bobs,) = await _place(o, BOB, 1, pinned=True)  # alice's spending is hers alone
    assert bobs.state is JobState.SUBMITTED
    (nobodys,) = await _place(o, None, 1, pinned=True)  # no person: no person's budget
    assert nobodys.state is JobState.SUBMITTED


async def test_a_person_at_their_budget_is_placed_where_it_is_not_capped(store: Store) -> None:
    """alpha is faster while alice may spend there; then her jobs wait at beta."""
    o = _world(store, budget=4.0)
    tasks = await _place(o, ALICE, 3, pinned=False)  # one pass: its own placements count too
    sites = []
    for t in tasks:
        sites += [a.site for a in await o.book.load_attempts(t.id)]
    assert sorted(sites) == ["alpha", "beta", "beta"]
    assert all(t.state is JobState.SUBMITTED for t in tasks)


def test_a_groups_children_spend_one_persons_budget_in_one_pass() -> None:
    """place_group's children are one person's: each child's claim lowers what the next may
    spend, within the one request that places them all."""
    alpha = site(profile("alpha", cpu_partition("cpu"), charge=CORE))
    inputs = PlacementInputs(
        snapshot(state(alpha.profile)),
        {"alpha": alpha},
        Policy(kind=PolicyKind.FIXED_SITE, site="alpha", fallback=False),
        now=NOW,
        person_budget={"alpha": (10.0, "per-person budget 10 - 0 (test)")},
    )
    got = place_group([ENV] * 3, inputs)
    assert [isinstance(d, Placement) for d in got] == [True, True, False]
    last = got[2]
    assert isinstance(last, Unschedulable)
    assert "per-person budget 10 - 0 (test)" in last.hint
