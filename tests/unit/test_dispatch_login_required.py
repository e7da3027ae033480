"""A Globus Compute site that refuses a submission for want of a login or consent: the attempt
fails before anything ran, and its reason carries the exact `fedhpc login` command."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from fedhpc.adapters.site import SubmittedJob
from fedhpc.domain.config import Site
from fedhpc.domain.job import JobSpec, JobState
from fedhpc.globus_auth.errors import GlobusLoginRequired
from fedhpc.ops.tasks import SubmitTaskRequest
from fedhpc.orchestrator.records import TaskRecord
from fedhpc.orchestrator.service import Orchestrator
from fedhpc.placement import Placement, PlacementInputs, Policy, place
from fedhpc.store import Store
from tests.unit.fake_submit import SubmitsOneByOne
from tests.unit.test_placement_place import paper_world
from tests.unit.test_placement_world import NOW, env

SCOPE = "urn:globus:auth:scope:transfer.api.globus.org:all[*https://x/data_access]"


class _NeedsConsent(SubmitsOneByOne):
    """The site adapter's surface dispatch uses; its transport answered 'consent required'."""

    login = "alice"
    roots: dict[str, str] = {}  # noqa: RUF012  (its profile names no $NAME root)

    def __init__(self, site: Site) -> None:
        self.site = site
        self.submitted: list[JobSpec] = []

    def root_path(self, path: str) -> str:
        return path

    async def submit(self, spec: JobSpec, *, ensure_dirs: Sequence[str] = ()) -> SubmittedJob:
        self.submitted.append(spec)
        raise GlobusLoginRequired("Globus requires a new consent", scopes=[SCOPE])


async def test_a_login_required_submission_fails_the_attempt_with_the_login_command(
    store: Store,
) -> None:
    sites, snap = paper_world()
    decision = place(
        env(gpus=4, cpus=8, wall_time="1h"), PlacementInputs(snap, sites, Policy(), now=NOW)
    )
    assert isinstance(decision, Placement)
    adapter = _NeedsConsent(sites[decision.site])
    o = Orchestrator(store, cast(Any, None), {decision.site: cast(Any, adapter)}, clock=lambda: NOW)
    task = TaskRecord(
        id="t1",
        request=SubmitTaskRequest(command=("true",), envelope=env(gpus=4, cpus=8, wall_time="1h")),
        idempotency_key="k1",
        created_at=NOW,
    )
    att = await o.dispatcher.dispatch(task, decision)
    assert att.state is JobState.FAILED
    assert att.job_id is None
    assert att.reason is not None
    assert f"fedhpc login --scope '{SCOPE}'" in att.reason
    stored = await o.book.load_attempts("t1")
    assert stored[-1].state is JobState.FAILED  # persisted: the next cycle will not look it up
