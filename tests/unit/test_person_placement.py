"""Placement for a site that runs each person as themselves (`identity = "person"`, service
mode): a person without a usable Globus Compute authorization there is never placed on it, and
is told what to do; another person's work, and work nobody signed in for, is placed as before.
The real store, real placement and the real facade store with people's sealed tokens; the
sites' adapters accept every job (`_Site`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, cast

import pytest

from fedhpc.adapters.arrays import ArrayJob
from fedhpc.adapters.by_person import submit_by_person
from fedhpc.adapters.transports.base import TransportError
from fedhpc.collector import Collector
from fedhpc.domain import ChargeKind, ChargeModel, JobState
from fedhpc.domain.job import JobObservation, JobSpec
from fedhpc.globus_auth.people import PersonNotAuthorized, acting_person, install
from fedhpc.ops.tasks import CancelRequest
from fedhpc.orchestrator.service import Orchestrator
from fedhpc.placement import Placement, PlacementInputs, Policy, PolicyKind, Unschedulable, place
from fedhpc.service.people import FacadeTokens
from fedhpc.settings import JOB_FOR
from fedhpc.store import Store
from tests.unit.person_tokens_world import ALICE, BOB, CAROL, canary, facade_tokens, sign_in
from tests.unit.test_placement_world import NOW, cpu_partition, env, profile, site, snapshot, state
from tests.unit.test_slow_site import _Site
from tests.unit.test_submit_accept import Clock, _req

CORE = ChargeModel(kind=ChargeKind.CORE_HOURS)
ENV = env(cpus=4, wall_time="1h")
ACTION = "sign in to fedhpc again through your MCP client, granting Globus Compute"


@pytest.fixture
async def people(tmp_path: Path) -> AsyncIterator[FacadeTokens]:
    """ALICE signed in granting Globus Compute; BOB signed in without that consent."""
    tokens = facade_tokens(tmp_path)
    await sign_in(tokens, ALICE)
    await sign_in(tokens, BOB, compute=False)
    install(tokens)
    try:
        yield tokens
    finally:
        install(None)
        await tokens.aclose()


class _PersonSite(_Site):
    """A per-person site's adapter surface: submissions split by person as the real adapter
    splits them (`submit_by_person`), and who each call was issued as (`acting_person`)."""

    def __init__(self, s: Any) -> None:
        super().__init__(s)
        self.seen: list[tuple[str, str | None, tuple[str, ...]]] = []
        self.unauthorized: set[str] = set()  # people the site refuses from now on

    async def submit_many(self, jobs: Sequence[Any]) -> list[Any]:
        return await submit_by_person(cast(Any, super().submit_many), jobs)

    async def submit(self, spec: Any, *, ensure_dirs: Sequence[str] = ()) -> Any:
        job = await super().submit(spec, ensure_dirs=ensure_dirs)
        self.seen.append(("submit", acting_person(), (job.job_id,)))
        return job

    async def status(self, job_ids: Sequence[str]) -> list[JobObservation]:
        self.seen.append(("status", acting_person(), tuple(job_ids)))
        if acting_person() in self.unauthorized:
            raise PersonNotAuthorized("the provider refused to refresh your authorization")
        return await super().status(job_ids)

    async def cancel(self, job_ids: Sequence[str]) -> None:
        self.seen.append(("cancel", acting_person(), tuple(job_ids)))
        await super().cancel(job_ids)


def _world(store: Store) -> Orchestrator:
    """alpha (idle; runs each person as themselves) and beta (busy; the service's identity)."""
    alpha = site(profile("alpha", cpu_partition("cpu"), charge=CORE), identity="person")
    beta = site(profile("beta", cpu_partition("cpu"), charge=CORE))
    busy = {"free_cpus": 0, "max_free_cpus_on_node": 0, "pending_jobs": 40, "running_jobs": 4}
    clock = Clock()
    collector = Collector({"alpha": alpha, "beta": beta}, {}, store, clock=clock)
    collector.latest = {"alpha": state(alpha.profile), "beta": state(beta.profile, cpu=busy)}
    collector.ready.set()
    adapters = {"alpha": cast(Any, _PersonSite(alpha)), "beta": cast(Any, _Site(beta))}
    return Orchestrator(store, collector, adapters, clock=clock, retry_window_s=120)


async def _place(o: Orchestrator, owner: str | None, *, pinned: bool) -> Any:
    policy = {"policy": PolicyKind.FIXED_SITE, "fixed_site": "alpha"} if pinned else {}
    k = await o.book.store.count("tasks")
    req = _req(command=("echo", str(k)), envelope=ENV, **policy)
    handle = await o.intake.submit_task(req, wait_s=0, owner=owner)
    await o.place_queued()
    task = await o.book.load_task(handle.task_id)
    return task, [a.site for a in await o.book.load_attempts(task.id)]


async def test_a_person_without_compute_consent_is_never_placed_on_a_per_person_site(
    store: Store, people: FacadeTokens
) -> None:
    o = _world(store)
    alices, where = await _place(o, ALICE, pinned=True)
    assert (alices.state, where) == (JobState.SUBMITTED, ["alpha"])
    bobs, where = await _place(o, BOB, pinned=True)
    assert (bobs.state, where) == (JobState.UNSCHEDULABLE, [])
    assert "did not grant Globus Compute" in bobs.reasons[0]
    assert ACTION in bobs.reasons[0]  # the hint says what to do
    bobs_free, where = await _place(o, BOB, pinned=False)  # beta runs as the service: fine
    assert (bobs_free.state, where) == (JobState.SUBMITTED, ["beta"])
    alices_free, where = await _place(o, ALICE, pinned=False)  # alpha is faster, and hers
    assert (alices_free.state, where) == (JobState.SUBMITTED, ["alpha"])
    nobodys, where = await _place(o, None, pinned=True)  # not signed in: the service's identity
    assert (nobodys.state, where) == (JobState.SUBMITTED, ["alpha"])
    # No token of anyone's in an event or a task's answer.
    events = await store.events_after(0, limit=1000)
    texts = [repr(events), *(t.model_dump_json() for t in (alices, bobs, bobs_free, nobodys))]
    for who in (ALICE, BOB):
        for what in ("auth", "compute", "transfer"):
            assert not any(canary(who, what) in text for text in texts)


async def test_each_persons_jobs_are_submitted_observed_and_cancelled_as_that_person(
    store: Store, people: FacadeTokens
) -> None:
    await sign_in(people, BOB)  # BOB grants Globus Compute this time
    o = _world(store)
    alices, _ = await _place(o, ALICE, pinned=True)
    bobs, _ = await _place(o, BOB, pinned=True)
    nobodys, _ = await _place(o, None, pinned=True)
    job = {t.owner: (await o.book.load_attempts(t.id))[0].job_id for t in (alices, bobs, nobodys)}
    await o.tick()
    await o.tools.cancel(CancelRequest(task_id=alices.id))
    alpha = cast(_PersonSite, o.adapters["alpha"])
    for kind in ("submit", "status"):
        calls = {(who, ids) for k, who, ids in alpha.seen if k == kind}
        # Each person's call carries their jobs only; work nobody signed in for, the service's.
        assert calls == {(ALICE, (job[ALICE],)), (BOB, (job[BOB],)), (None, (job[None],))}, kind
    assert [(who, ids) for k, who, ids in alpha.seen if k == "cancel"] == [(ALICE, (job[ALICE],))]


async def test_a_person_refused_at_observation_leaves_the_others_observed(
    store: Store, people: FacadeTokens
) -> None:
    await sign_in(people, BOB)
    o = _world(store)
    alices, _ = await _place(o, ALICE, pinned=True)
    bobs, _ = await _place(o, BOB, pinned=True)
    cast(_PersonSite, o.adapters["alpha"]).unauthorized.add(BOB)  # e.g. he revoked consent
    await o.tick()
    (alice_att,) = await o.book.load_attempts(alices.id)
    (bob_att,) = await o.book.load_attempts(bobs.id)
    assert alice_att.state is JobState.RUNNING  # observed as her
    assert bob_att.state is JobState.SUBMITTED  # unobserved: neither lost nor failed
    assert (await o.book.load_task(bobs.id)).state is JobState.SUBMITTED


async def test_without_the_facade_nobody_is_placed_on_a_per_person_site(store: Store) -> None:
    o = _world(store)  # no person tokens installed: the daemon keeps nobody's
    task, where = await _place(o, ALICE, pinned=True)
    assert (task.state, where) == (JobState.UNSCHEDULABLE, [])
    assert "[service.facade]" in task.reasons[0]


def test_the_authorization_rule_names_the_persons_refusal_and_the_action() -> None:
    alpha = site(profile("alpha", cpu_partition("cpu")), identity="person")
    beta = site(profile("beta", cpu_partition("cpu")))
    why = f"alpha runs each person's work as that person: no token; {ACTION}"
    inputs = PlacementInputs(
        snapshot(state(alpha.profile), state(beta.profile)),
        {"alpha": alpha, "beta": beta},
        Policy(kind=PolicyKind.FIXED_SITE, site="alpha", fallback=False),
        now=NOW,
        person_refused={"alpha": why},
    )
    refused = place(ENV, inputs)
    assert isinstance(refused, Unschedulable)
    assert "fail only on authorization" in refused.hint and ACTION in refused.hint
    assert any(why in r for c in refused.reasons for r in c.reasons)
    anywhere = place(ENV, PlacementInputs(**{**_fields(inputs), "policy": None}))
    assert isinstance(anywhere, Placement) and anywhere.site == "beta"


def _fields(inputs: PlacementInputs) -> dict[str, Any]:
    return {f: getattr(inputs, f) for f in inputs.__dataclass_fields__}


async def test_one_persons_refused_submission_leaves_the_others_answers_whole() -> None:
    """A batch at a per-person site is sent once per person: BOB's missing consent answers
    his jobs with it, CAROL's unreachable call leaves hers unknown, ALICE's are queued, and
    each answer stays at its job's place, an array's members each in turn."""

    def job(owner: str | None, n: int) -> Any:
        env = {} if owner is None else {JOB_FOR.name: owner}
        spec = JobSpec.model_validate(
            {
                "name": f"j{n}",
                "command": ["true"],
                "partition": "cpu",
                "env": env,
                "shape": {"nodes": 1, "cpus": 1, "wall_time_s": 60},
            }
        )
        return (spec, ())

    alice_array = ArrayJob("arr", [job(ALICE, 9)[0], job(ALICE, 10)[0]], (), "/out")
    jobs = [job(ALICE, 1), job(BOB, 2), job(CAROL, 3), alice_array, job(None, 4), job(BOB, 5)]
    asked: list[tuple[str | None, int]] = []

    async def submit(part: Sequence[Any]) -> list[Any]:
        who = acting_person()
        asked.append((who, len(part)))
        if who == BOB:
            raise PersonNotAuthorized("your sign-in did not grant Globus Compute")
        if who == CAROL:
            raise TransportError("the endpoint did not answer")
        sizes = [len(j.members) if isinstance(j, ArrayJob) else 1 for j in part]
        return [f"{who}-job" for _ in range(sum(sizes))]

    got = await submit_by_person(submit, jobs)
    assert asked == [(ALICE, 2), (BOB, 2), (CAROL, 1), (None, 1)]
    assert got[0] == f"{ALICE}-job" and got[3:5] == [f"{ALICE}-job"] * 2
    assert isinstance(got[1], PersonNotAuthorized) and isinstance(got[6], PersonNotAuthorized)
    assert got[2] is None  # unknown: found by its name in a later cycle
    assert got[5] == "None-job"
