"""The daemon's site-name check with an offline site: a site that is down is a known site,
not an unconfigured one ("add [[sites.X.accounts]]" was false); the request goes on and
placement says the site is offline. A real store, collector and placement."""

from __future__ import annotations

import pytest

from fedhpc.collector import Collector
from fedhpc.daemon.sitenames import check_request_sites
from fedhpc.domain.site import Health
from fedhpc.errors import FedError
from fedhpc.ops.sitecheck import SiteNotUsable
from fedhpc.ops.tasks import SubmitTaskRequest
from fedhpc.orchestrator.service import Orchestrator
from fedhpc.store import Store
from tests.unit.test_placement_world import NOW, cpu_partition, env, profile, site, state


def _world(store: Store, alpha: Health) -> Orchestrator:
    """alpha needs an account (the profile says so) and has none in config; beta is fine."""
    sites = {n: site(profile(n, cpu_partition("cpu"))) for n in ("alpha", "beta")}
    conv = sites["alpha"].profile.conventions.model_copy(update={"account_required": True})
    alpha_profile = sites["alpha"].profile.model_copy(update={"conventions": conv})
    sites["alpha"] = site(alpha_profile)
    o = Orchestrator(store, Collector(sites, {}, store, clock=lambda: NOW), {}, clock=lambda: NOW)
    o.collector.latest["alpha"] = state(alpha_profile, health=alpha, accounts=())
    o.collector.latest["beta"] = state(sites["beta"].profile)
    return o


async def test_an_offline_site_is_named_as_offline_not_as_unconfigured(store: Store) -> None:
    o = _world(store, Health.OFFLINE)
    check_request_sites(o.collector, fixed_site="alpha")
    check_request_sites(o.collector, envelope=env(cpus=1, sites_include=("alpha",)))
    handle, _ = await o.intake.accept_task(
        SubmitTaskRequest(command=("true",), envelope=env(cpus=1), fixed_site="alpha")
    )
    await o.placer.place_queued()  # the placer's pass: only alpha may run it, and it is down
    task = await o.book.load_task(handle.task_id)
    text = f"{task.decision} {' '.join(task.reasons)}"
    # As for a site with an account that is down: it waits for alpha, which is offline.
    assert "waiting for alpha: offline since" in text and "(probe failed)" in text, text
    assert "account" not in text


async def test_an_answering_site_without_an_account_still_says_how_to_add_one(
    store: Store,
) -> None:
    o = _world(store, Health.OK)
    with pytest.raises(SiteNotUsable) as exc:
        check_request_sites(o.collector, fixed_site="alpha")
    assert "[[sites.alpha.accounts]]" in exc.value.as_dict()["fields"][0]["reason"]
    assert isinstance(exc.value, FedError)
