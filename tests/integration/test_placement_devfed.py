"""Placement against the real local Slurm federation: live probes, real queues, real sbatch."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest

from fedhpc.adapters.site import SiteAdapter, open_adapter
from fedhpc.domain import (
    ArraySpec,
    JobSpec,
    JobState,
    PartitionState,
    ResourceEnvelope,
    ResourceSnapshot,
    Shape,
    SiteState,
    UserConfig,
    UserSiteConfig,
)
from fedhpc.domain.config import Site
from fedhpc.orchestrator.start_estimates import requests_from_trace, scheduler_estimates
from fedhpc.placement import Placement, PlacementInputs, Policy, PolicyKind, Unschedulable, place
from fedhpc.profiles import load_federation

pytestmark = pytest.mark.devfed

Fed = tuple[dict[str, Site], dict[str, SiteAdapter]]


@pytest.fixture
async def federation(
    devfed: Any, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Callable[[UserConfig | None], Fed]]:
    """Opens the dev sites (optionally with a user config); closes every transport at the end."""
    monkeypatch.setenv("FEDHPC_DEVFED", "1")
    opened: list[SiteAdapter] = []

    def make(config: UserConfig | None = None) -> Fed:
        sites = load_federation(config or UserConfig())
        adapters = {n: open_adapter(s) for n, s in sites.items()}
        opened.extend(adapters.values())
        return sites, adapters

    yield make
    for adapter in opened:
        await adapter.transport.aclose()


async def probe_all(adapters: dict[str, SiteAdapter]) -> tuple[ResourceSnapshot, datetime]:
    states: dict[str, SiteState] = {}

    async def one(name: str) -> None:
        states[name] = await adapters[name].probe(timeout_s=20)

    with anyio.fail_after(40):
        async with anyio.create_task_group() as tg:
            for name in sorted(adapters):
                tg.start_soon(one, name)
    now = datetime.now(UTC)
    return ResourceSnapshot(taken_at=now, sites=states), now


def partition(snap: ResourceSnapshot, site: str, name: str) -> PartitionState:
    found = snap.sites[site].partition(name)
    assert found is not None, f"{site} probe lacks {name}"
    return found


async def until(check: Callable[[], Awaitable[bool]], limit: float = 30) -> None:
    with anyio.fail_after(limit):
        while not await check():
            await anyio.sleep(0.3)


def _job(name: str, partition: str, *, gpus: int = 0, array: ArraySpec | None = None) -> JobSpec:
    return JobSpec(
        name=name,
        command=("sleep", "90"),
        partition=partition,
        account="fedhpc-gpu" if gpus or partition.startswith("gh") else "fedhpc-cpu",
        shape=Shape(cpus=1, gpus=gpus, memory_mib=128, wall_time_s=300),
        array=array,
        stdout="/dev/null",  # not slurm-<id>.out in the checkout
    )


FOUR_GPUS = ResourceEnvelope.model_validate(
    {"gpus": {"min": 4}, "cpus": {"min": 4}, "wall_time": {"min": "10m"}}
)


def four_gpu_partitions(sites: dict[str, Site]) -> list[tuple[str, str, str]]:
    """(site, partition, accelerator type) of every open partition with >= 4 GPUs per node."""
    out = []
    for name in sorted(sites):
        prof = sites[name].profile
        for spec in prof.partitions:
            acc = spec.node.accelerator
            if acc and acc.count >= 4 and spec.name not in prof.blocked_partitions:
                out.append((name, spec.name, acc.type))
    return out


async def test_four_gpu_request_lands_where_gpus_are_free_not_on_the_shorter_queue(
    federation: Callable[[UserConfig | None], Fed],
) -> None:
    sites, adapters = federation(None)
    snap, _ = await probe_all(adapters)
    parts = four_gpu_partitions(sites)
    # Other tests share the federation: pick the partition that is free now from a fresh probe
    # (devdeltaai/ghx4 when it is), and any other 4-GPU partition as the short-queue rival.
    free = [p for p in parts if partition(snap, p[0], p[1]).max_free_gpus_on_node >= 4]
    assert free, f"no 4-GPU partition has a free node now: {parts}"
    target = next((p for p in free if p[1] == "ghx4"), free[0])
    rival = next(p for p in parts if p != target)
    mine: list[tuple[SiteAdapter, str]] = []
    try:
        # The rival: its free GPUs taken by one job, nothing queued. The target: all GPUs free,
        # but a queue of CPU-only array elements held back by the array's limit of one.
        take = partition(snap, rival[0], rival[1]).max_free_gpus_on_node
        if take >= 4:
            job = await adapters[rival[0]].submit(_job("fedhpc-place-block", rival[1], gpus=take))
            mine.append((adapters[rival[0]], job.job_id))
        queue = await adapters[target[0]].submit(
            _job("fedhpc-place-queue", target[1], array=ArraySpec(stop=7, limit=1))
        )
        mine.append((adapters[target[0]], queue.job_id))

        async def settled() -> bool:
            # Our blocker runs (or waits behind someone else's GPUs, which serves too), and the
            # queue is visible.
            for adapter, job_id in mine:
                states = {o.state for o in await adapter.status([job_id])}
                if not states or states == {JobState.SUBMITTED}:
                    return False
                if job_id != queue.job_id and JobState.RUNNING not in states:
                    lv = await adapter.probe(timeout_s=20)
                    if (lv.partition(rival[1]) or r0).max_free_gpus_on_node >= 4:
                        return False
            return True

        r0 = partition(snap, rival[0], rival[1])
        await until(settled, limit=40)
        snap, now = await probe_all(adapters)
        t = partition(snap, target[0], target[1])
        r = partition(snap, rival[0], rival[1])
        # Expectations from the probe itself, not from what we hoped to set up.
        assert t.max_free_gpus_on_node >= 4 and r.max_free_gpus_on_node < 4, (t, r)
        assert t.pending_jobs > r.pending_jobs, (t, r)

        types = tuple(sorted({target[2], rival[2]}))
        envelope = FOUR_GPUS.model_copy(update={"accelerator_types": types})
        if target[2] == rival[2]:  # same type elsewhere: keep only these two partitions
            envelope = envelope.model_copy(
                update={"sites_include": tuple(sorted({target[0], rival[0]}))}
            )
        best = place(envelope, PlacementInputs(snap, sites, Policy(), now=now))
        shortest = place(
            envelope, PlacementInputs(snap, sites, Policy(kind=PolicyKind.SHORTEST_QUEUE), now=now)
        )
        assert isinstance(best, Placement) and isinstance(shortest, Placement)
        assert (best.site, best.partition) == target[:2]
        assert best.shape.gpus == 4 and best.account == "fedhpc-gpu"
        chosen = partition(snap, shortest.site, shortest.partition)
        assert chosen.pending_jobs < t.pending_jobs  # shortest-queue went to a shorter queue
        assert (shortest.site, shortest.partition) != target[:2]
    finally:
        for adapter, job_id in mine:
            await adapter.cancel([job_id])


async def test_only_feasible_site_out_of_credit_is_unschedulable_with_the_credit_reason(
    federation: Callable[[UserConfig | None], Fed],
) -> None:
    config = UserConfig(sites={"devdeltaai": UserSiteConfig(budget=0.0)})
    sites, adapters = federation(config)
    snap, now = await probe_all(adapters)
    gh200x4 = FOUR_GPUS.model_copy(update={"accelerator_types": ("gh200",)})  # devdeltaai only
    out = place(gh200x4, PlacementInputs(snap, sites, now=now))
    assert isinstance(out, Unschedulable), out
    ghx4 = [c for c in out.reasons if c.id.startswith("devdeltaai/ghx4/")]
    assert ghx4, out.reasons
    assert all(any(r.startswith("credit: out of credit") for r in c.reasons) for c in ghx4)
    assert all(len(c.reasons) == 1 for c in ghx4)  # credit is the only thing in the way
    assert "budget" in out.hint


async def test_two_hundred_gib_per_accelerator_is_rejected_at_every_site(
    federation: Callable[[UserConfig | None], Fed],
) -> None:
    sites, adapters = federation(None)
    snap, now = await probe_all(adapters)
    huge = ResourceEnvelope.model_validate({"gpus": {"min": 1}, "min_accelerator_memory_gib": 200})
    out = place(huge, PlacementInputs(snap, sites, now=now))
    assert isinstance(out, Unschedulable)
    assert {c.id.split("/")[0] for c in out.reasons} == set(sites)
    assert all(any(r.startswith("accelerator:") for r in c.reasons) for c in out.reasons)


async def test_scheduler_estimates_come_from_real_sbatch_test_only(
    federation: Callable[[UserConfig | None], Fed],
) -> None:
    sites, adapters = federation(None)
    snap, now = await probe_all(adapters)
    one_gpu = ResourceEnvelope.model_validate({"gpus": {"min": 1}, "wall_time": {"min": "10m"}})
    first = place(one_gpu, PlacementInputs(snap, sites, now=now))
    assert isinstance(first, Placement)
    requests = requests_from_trace(first.trace, top=6)
    with anyio.fail_after(60):
        predicted = await scheduler_estimates(requests, adapters)
    assert predicted, "sbatch --test-only answered for no candidate"
    for (site_name, *_), start in predicted.items():
        assert site_name in sites
        assert abs((start - now).total_seconds()) < 24 * 3600
    second = place(one_gpu, PlacementInputs(snap, sites, now=now, estimates=predicted))
    assert isinstance(second, Placement)
    sources = {c.estimates.wait_source for c in second.trace.candidates if c.estimates}
    # The scheduler's own estimate, or its yield to a slot free now with nothing queued ahead
    # (on an idle federation, every answered candidate).
    assert sources & {"scheduler", "scheduler:free-now"}
