"""Live billing weights on real Slurm (issue 42): an operator changes a partition's
`TRESBillingWeights` with `scontrol update`; the site's next reading of them (the probe's
`scontrol --oneliner show partition`) changes what placement says a job there charges, on
the decision and on each candidate, where the profile's charge follows the scheduler. The
partition's weights are put back as they were, whatever happens."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from fedhpc.adapters.site import SiteAdapter, open_adapter
from fedhpc.domain import ChargeKind, ChargeModel, ResourceEnvelope
from fedhpc.domain.config import Site
from fedhpc.domain.site import ResourceSnapshot, SiteState
from fedhpc.placement import Placement, PlacementInputs, Policy, place
from fedhpc.profiles import load_federation

pytestmark = pytest.mark.devfed

SITE, PARTITION = "devdelta", "cpu"
FOLLOW = ChargeModel(kind=ChargeKind.CORE_HOURS, follow_scheduler=True)
FOUR_CORES = ResourceEnvelope.model_validate(
    {"cpus": {"min": 4, "max": 4}, "memory": {"min": "1G"}, "wall_time": {"min": "1h"}}
)


def _weights(fed: Any) -> str:
    """The partition's TRESBillingWeights as Slurm shows them now ("" for none)."""
    out = fed.run(SITE, "scontrol", "--oneliner", "show", "partition", PARTITION)
    assert out.returncode == 0, out.stderr
    found = re.search(r"TRESBillingWeights=(\S+)", out.stdout)
    return found.group(1) if found else ""


def _set(fed: Any, weights: str) -> None:
    update = ["scontrol", "update", f"PartitionName={PARTITION}", f"TRESBillingWeights={weights}"]
    out = fed.run(SITE, *update)
    assert out.returncode == 0, out.stderr


@pytest.fixture
async def delta(devfed: Any, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[SiteAdapter]:
    """devdelta as configured, its `cpu` partition only, charged as the scheduler's billing
    weights say (what `sites discover` writes for a Slurm site); the weights restored after."""
    monkeypatch.setenv("FEDHPC_DEVFED", "1")
    site = load_federation()[SITE]
    parts = tuple(
        p.model_copy(update={"charge": None})
        for p in site.profile.partitions
        if p.name == PARTITION
    )
    followed = replace(
        site, profile=site.profile.model_copy(update={"charge": FOLLOW, "partitions": parts})
    )
    before = _weights(devfed)
    adapter = open_adapter(followed)
    try:
        yield adapter
    finally:
        _set(devfed, before)
        await adapter.transport.aclose()
        assert _weights(devfed) == before


async def _charges(adapter: SiteAdapter) -> tuple[SiteState, float, float]:
    """A probe that reads the weights, and a 4-core hour's charge on the decision and on the
    partition's candidate in its trace."""
    adapter.billing_every_s = 0  # read them at this probe (the daemon: every 600 s)
    state = await adapter.probe()
    snap = ResourceSnapshot(taken_at=datetime.now(UTC), sites={SITE: state})
    sites: dict[str, Site] = {SITE: adapter.site}
    decision = place(FOUR_CORES, PlacementInputs(snap, sites, Policy(), now=snap.taken_at))
    assert isinstance(decision, Placement), decision
    assert decision.partition == PARTITION
    (cand,) = [c for c in decision.trace.candidates if c.partition == PARTITION and c.feasible]
    assert cand.estimates is not None
    hours = decision.shape.wall_time_s / 3600
    return state, decision.estimates.charge / hours, cand.estimates.charge / hours


async def test_a_partitions_charge_follows_its_billing_weights_as_slurm_changes_them(
    devfed: Any, delta: SiteAdapter
) -> None:
    _set(devfed, "CPU=2.0")
    state, decided, candidate = await _charges(delta)
    part = state.partition(PARTITION)
    assert part is not None and part.billing_weights == (("CPU", 2.0),)
    assert decided == candidate == pytest.approx(4 * 2.0)  # 4 cores x 2.0 an hour
    _set(devfed, "CPU=3.0,Mem=0.5G")  # memory per GiB: a 64-core, 128 GiB node
    state, decided, candidate = await _charges(delta)
    part = state.partition(PARTITION)
    assert part is not None and dict(part.billing_weights) == {"CPU": 3.0, "Mem": 0.5}
    # A node's billing per hour shared over its cores: (64 x 3.0 + 128 x 0.5) / 64 = 4.0.
    assert decided == candidate == pytest.approx(4 * 4.0)
