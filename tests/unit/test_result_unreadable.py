"""get_result of an ended task whose output sits on a site fedhpc cannot read now: `next` says
why, truthfully for each case (offline, not probed yet since the daemon started, no longer in
config.toml: waiting for inspect_federation to show it ok never helps a removed site). A real
store, collector and local-shell adapters; no site is contacted (none is readable)."""

from __future__ import annotations

import pytest

from fedhpc.adapters.site import SiteAdapter
from fedhpc.adapters.transports.local import LocalTransport
from fedhpc.collector import Collector
from fedhpc.domain.job import JobState
from fedhpc.domain.site import Health, TransportSpec
from fedhpc.ops.tasks import ResultRequest, SubmitTaskRequest
from fedhpc.orchestrator.records import TaskRecord
from fedhpc.orchestrator.service import Orchestrator
from fedhpc.store import Store
from tests.unit.attempts import attempt
from tests.unit.test_placement_world import NOW, cpu_partition, env, profile, site, state


async def _ended_on(store: Store, where: str, health: Health | None) -> tuple[Orchestrator, str]:
    sites = {n: site(profile(n, cpu_partition("cpu"))) for n in ("alpha", "beta")}
    spec = TransportSpec(kind="local")
    adapters = {n: SiteAdapter(s, LocalTransport(spec)) for n, s in sites.items()}
    o = Orchestrator(
        store, Collector(sites, {}, store, clock=lambda: NOW), adapters, clock=lambda: NOW
    )
    o.collector.latest["beta"] = state(sites["beta"].profile)
    if health is not None:
        o.collector.latest["alpha"] = state(sites["alpha"].profile, health=health)
    task = TaskRecord(
        id="t0000000a1b",
        request=SubmitTaskRequest(command=("true",), envelope=env(cpus=1)),
        idempotency_key="k",
        state=JobState.COMPLETED,
        created_at=NOW,
        attempts_made=1,
        accepted_attempt=1,
    )
    att = attempt(task.id, now=NOW, state=JobState.COMPLETED, site=where, stdout="/o/out")
    async with store.transaction() as tx:
        await o.book.save(tx, task, att, at=NOW)
    return o, task.id


@pytest.mark.parametrize(
    ("where", "health", "says"),
    [
        ("alpha", Health.OFFLINE, "which does not answer now (nothing is lost)"),
        ("alpha", None, "which fedhpc has not probed yet since the daemon started"),
        ("gamma", None, "which is not an enabled site of this daemon"),
    ],
)
async def test_next_says_why_the_output_cannot_be_read(
    store: Store, where: str, health: Health | None, says: str
) -> None:
    o, task_id = await _ended_on(store, where, health)
    got = await o.answers.hinted_result(await o.tools.get_result(ResultRequest(task_id=task_id)))
    assert got.unreadable == where and got.preview is None and got.outputs == ()
    assert got.next.startswith(f"Completed, but its output is on {where}, {says}"), got.next
    assert f"get_result(task_id='{task_id}')" in got.next
    if where == "gamma":
        assert "[sites.gamma]" in got.next and "fedhpc daemon restart" in got.next
        assert "inspect_federation" not in got.next  # it will never show gamma
