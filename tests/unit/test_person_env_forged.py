"""Who a job at a per-person site runs as is its task's owner, written by the daemon: a task's
own `env` naming someone in FEDHPC_FOR (the variable the daemon sets) never makes it run with
that person's token, whoever submitted it."""

from __future__ import annotations

from typing import cast

from fedhpc.service.people import FacadeTokens
from fedhpc.settings import JOB_FOR
from fedhpc.store import Store
from tests.unit.person_tokens_world import ALICE, BOB, sign_in
from tests.unit.test_person_placement import ENV, _PersonSite, _world, people
from tests.unit.test_submit_accept import _req

__all__ = ["people"]  # the fixture, used by name


async def test_a_forged_fedhpc_for_runs_as_the_tasks_owner_not_as_the_named_person(
    store: Store, people: FacadeTokens
) -> None:
    await sign_in(people, BOB)
    o = _world(store)
    forged = {JOB_FOR.name: ALICE}
    for owner in (None, BOB):  # the operator's CLI; a signed-in person
        req = _req(
            command=("echo", str(owner)),
            envelope=ENV,
            env=forged,
            policy="fixed-site",
            fixed_site="alpha",
        )
        await o.intake.submit_task(req, wait_s=0, owner=owner)
    await o.place_queued()
    alpha = cast(_PersonSite, o.adapters["alpha"])
    submitted_as = sorted(str(who) for kind, who, _ in alpha.seen if kind == "submit")
    assert submitted_as == sorted([str(None), BOB])
