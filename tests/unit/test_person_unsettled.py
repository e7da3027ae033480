"""At a per-person site every command about a job runs as the job's person, the accounting asked
again for an ended job whose row was not settled yet included: one person's observation never
carries another person's job ids (nor reads their jobs with their own token)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from fedhpc.collector import Collector
from fedhpc.domain.job import AccountingRecord
from fedhpc.globus_auth.people import acting_person
from fedhpc.orchestrator.service import Orchestrator
from fedhpc.service.people import FacadeTokens
from fedhpc.store import Store
from tests.unit.person_tokens_world import ALICE, BOB, sign_in
from tests.unit.test_person_placement import CORE, _PersonSite, _place, people
from tests.unit.test_placement_world import cpu_partition, profile, site, state
from tests.unit.test_submit_accept import Clock

__all__ = ["people"]  # the fixture, used by name


class _Recording(_PersonSite):
    async def accounting(self, job_ids: Sequence[str]) -> list[AccountingRecord]:
        self.seen.append(("accounting", acting_person(), tuple(job_ids)))
        return await super().accounting(job_ids)


def _world(store: Store) -> Orchestrator:
    alpha = site(profile("alpha", cpu_partition("cpu"), charge=CORE), identity="person")
    clock = Clock()
    collector = Collector({"alpha": alpha}, {}, store, clock=clock)
    collector.latest = {"alpha": state(alpha.profile)}
    collector.ready.set()
    adapters = {"alpha": cast(Any, _Recording(alpha))}
    return Orchestrator(store, collector, adapters, clock=clock, retry_window_s=120)


async def test_an_unsettled_job_is_asked_about_as_its_own_person_only(
    store: Store, people: FacadeTokens
) -> None:
    await sign_in(people, BOB)
    o = _world(store)
    await _place(o, ALICE, pinned=True)  # her job is live, observed as her
    bobs, _ = await _place(o, BOB, pinned=True)
    (bob_att,) = await o.book.load_attempts(bobs.id)
    assert bob_att.job_id is not None
    # BOB's job ended; its final accounting row is not settled yet: asked for again.
    o.control.unsettled["alpha"] = {bob_att.job_id: (bobs.id, bob_att.n, 0.0)}
    await o.tick()
    alpha = cast(_Recording, o.adapters["alpha"])
    asked = [(who, ids) for kind, who, ids in alpha.seen if kind == "accounting"]
    assert (BOB, (bob_att.job_id,)) in asked
    assert all(bob_att.job_id not in ids for who, ids in asked if who != BOB), asked
