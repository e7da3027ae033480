"""A site's cap on the user's pending jobs (`max_pending_per_user`, issue 40): work over it
waits in fedhpc, queued with the reason, counted across the site's partitions and with the
jobs placed since the last probe, and goes once the probe shows the queue shorter. A real
store and real placement; no site is contacted."""

from __future__ import annotations

from fedhpc.domain.config import Site, UserSiteConfig
from fedhpc.domain.job import JobState
from fedhpc.orchestrator.holdback import HOLD_PREFIX, held_by_limits
from fedhpc.orchestrator.records import TaskRecord
from fedhpc.placement import Unschedulable
from fedhpc.store import Store
from tests.unit.test_placement_world import NOW, cpu_partition, profile, site, state
from tests.unit.test_submit_accept import Clock, _orchestrator, _req

CAPPED = site(profile("alpha", cpu_partition("p1"), cpu_partition("p2"), max_pending_per_user=3))


async def test_pending_jobs_across_the_sites_partitions_reach_its_cap_and_hold_the_task(
    store: Store,
) -> None:
    o = _orchestrator(store, Clock(), alpha=CAPPED)
    o.collector.latest["alpha"] = state(
        CAPPED.profile, p1={"user_pending_jobs": 2}, p2={"user_pending_jobs": 1}
    )
    task = TaskRecord(id="t1", request=_req(), idempotency_key="k", created_at=NOW)
    u = await o.planner.decide(task)
    assert isinstance(u, Unschedulable)
    assert held_by_limits(o.collector, u, o.claims.ledger()) == ["alpha: 3 of 3 pending jobs"]
    # Running jobs are no queue: with two of the three started, the task goes.
    o.collector.latest["alpha"] = state(
        CAPPED.profile, p1={"user_pending_jobs": 0, "user_running_jobs": 2}, p2={}
    )
    placed = await o.planner.decide(task)
    assert not isinstance(placed, Unschedulable) and placed.site == "alpha"


async def test_jobs_placed_since_the_probe_count_and_the_rest_wait_queued_with_the_reason(
    store: Store,
) -> None:
    clock = Clock()
    o = _orchestrator(store, clock, alpha=CAPPED)
    o.collector.latest["alpha"] = state(CAPPED.profile, p1={"user_pending_jobs": 1})
    handles = [
        await o.intake.submit_task(_req(command=("echo", str(i))), wait_s=0) for i in range(6)
    ]
    await o.place_queued()  # no adapter here: the dispatches fail, the cap is what counts
    assert o.planner.placed_this_cycle == {"alpha": 2}  # 1 pending + 2 placed = the cap
    tasks = [await o.book.load_task(h.task_id) for h in handles]
    held = [t for t in tasks if t.state is JobState.QUEUED]
    assert len(held) == 4
    for t in held:
        assert t.decision.startswith(HOLD_PREFIX)
        assert "alpha: 3 of 3 pending jobs" in t.decision and "start or finish" in t.decision
    # A hold is routine: nobody is woken for it (the two placed fail to dispatch here).
    assert {e.subject for e in await store.events_after(0)}.isdisjoint(t.id for t in held)


def test_the_users_config_only_lowers_the_cap() -> None:
    base = profile("alpha", cpu_partition("p1"), max_pending_per_user=10)
    assert Site(base, UserSiteConfig(max_pending_per_user=50)).profile.max_pending_per_user == 10
    assert Site(base, UserSiteConfig(max_pending_per_user=4)).profile.max_pending_per_user == 4
    none = profile("beta", cpu_partition("p1"))
    assert none.max_pending_per_user is None  # no cap unless the center or the user sets one
    assert Site(none, UserSiteConfig(max_pending_per_user=7)).profile.max_pending_per_user == 7
    assert Site(none, UserSiteConfig()).profile.max_pending_per_user is None
