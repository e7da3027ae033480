"""A storage root given as a login-shell variable (TACC's `$SCRATCH`, `$WORK`) is expanded by
the site's own shell, through a real local transport (bash), before any folder is named: an
unset variable is one clear `workdir_failed` error, never a folder literally called `$SCRATCH`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest

from fedhpc.adapters.command import Command, CommandResult
from fedhpc.adapters.site import SiteAdapter, StorageUnread, WorkdirFailed
from fedhpc.adapters.transports.base import TransportError
from fedhpc.adapters.transports.local import LocalTransport
from fedhpc.domain.config import Site, UserSiteConfig
from fedhpc.domain.job import JobState
from fedhpc.domain.site import StorageRoot, TransportSpec
from fedhpc.ops.tasks import SubmitTaskRequest
from fedhpc.orchestrator.dispatch import Dispatcher
from fedhpc.orchestrator.records import TaskRecord
from fedhpc.orchestrator.service import Orchestrator
from fedhpc.placement import Placement, PlacementInputs, Policy, place
from fedhpc.profiles import load_profiles
from fedhpc.store import Store
from tests.unit.test_placement_place import paper_world
from tests.unit.test_placement_world import NOW, env


def _vista(env: dict[str, str], **user: str) -> SiteAdapter:
    """The shipped Vista profile (roots `$HOME`, `$WORK`, `$SCRATCH`) over a local shell."""
    spec = TransportSpec(kind="local", env=env)
    profile = load_profiles()["vista"].model_copy(update={"transport": spec})
    site = Site(profile=profile, user=UserSiteConfig(**user))
    return SiteAdapter(site, LocalTransport(spec))


async def test_scratch_is_expanded_by_the_login_shell_and_is_the_users_own(tmp_path: Path) -> None:
    adapter = _vista({"SCRATCH": f"{tmp_path}/scratch/07/me/", "WORK": "/work/07/me"})
    with pytest.raises(
        StorageUnread, match=r"cannot read the storage roots of vista \(\$SCRATCH\)"
    ):
        adapter.root_path("$SCRATCH")  # never a guess before the site answered
    await adapter.read_roots()
    assert adapter.calls["roots"] == 1
    assert adapter.root_path("$SCRATCH") == f"{tmp_path}/scratch/07/me"
    assert adapter.root_path("$WORK/runs") == "/work/07/me/runs"
    assert adapter.root_path("/plain/path") == "/plain/path"
    # A `$NAME` root is per user already: no second login folder inside it.
    assert Dispatcher._workbase(adapter) == f"{tmp_path}/scratch/07/me/fedhpc"


async def test_an_unset_variable_is_one_clear_error_and_names_the_fix() -> None:
    adapter = _vista({"WORK": "/work/07/me", "SCRATCH": ""})
    await adapter.read_roots()
    with pytest.raises(WorkdirFailed) as caught:
        Dispatcher._workbase(adapter)
    err = caught.value
    assert err.code == "workdir_failed"
    assert err.message == (
        "cannot create the job's folder on vista: storage root $SCRATCH: "
        "$SCRATCH is not set in the login environment"
    )
    assert "workdir" in (err.hint or "") and "fedhpc doctor vista" in (err.hint or "")
    with pytest.raises(WorkdirFailed, match="is not \\$NAME"):
        adapter.root_path("$(touch x)")  # nothing from a profile is run
    assert not Path("x").exists()


async def test_the_users_workdir_wins_without_reading_any_variable() -> None:
    adapter = _vista({}, workdir="/work/07/me/jobs/")
    assert Dispatcher._workbase(adapter) == "/work/07/me/jobs"
    assert adapter.calls["roots"] == 0


async def test_a_failed_read_leaves_the_roots_unread_for_the_next_probe() -> None:
    """Neither a failing shell nor a failing transport reads as 'every variable unset': the
    roots stay unread (a transient error that says why), and are read again later."""
    adapter = _vista({"PATH": "/nonexistent"})  # bash cannot be found: the command fails
    await adapter.read_roots()
    assert adapter.roots is None
    adapter.transport = LocalTransport(TransportSpec(kind="local", options={"attempts": "1"}))
    adapter.transport.run = _refuse  # type: ignore[method-assign]
    await adapter.read_roots()
    assert adapter.roots is None
    with pytest.raises(StorageUnread) as caught:
        adapter.root_path("$SCRATCH")
    assert caught.value.code == "storage_unread"
    assert caught.value.message == (
        "cannot read the storage roots of vista ($SCRATCH): "
        "ssh: connect to host vista: Connection refused"
    )
    assert adapter.calls["roots"] == 2
    await adapter.read_roots(unless_within_s=60)  # not again so soon
    assert adapter.calls["roots"] == 2
    adapter.transport = LocalTransport(TransportSpec(kind="local", env={"SCRATCH": "/s/me"}))
    await adapter.read_roots()  # the site answers again
    assert adapter.root_path("$SCRATCH/x") == "/s/me/x"


async def test_an_unread_root_fails_only_that_attempt_and_names_no_folder(store: Store) -> None:
    """Dispatch on a site whose roots cannot be read: a failed attempt that no scheduler saw,
    with the transient reason (the placer moves on to the next feasible site), and no folder,
    job or second read per task."""
    p, adapter = _placed_on_a_scratch_site()
    o = Orchestrator(store, cast(Any, None), {p.site: adapter}, clock=lambda: NOW)
    for n, task_id in enumerate(("t1", "t2"), start=1):
        req = SubmitTaskRequest(command=("true",), envelope=env(gpus=4))
        task = TaskRecord(id=task_id, request=req, idempotency_key=task_id, created_at=NOW)
        att = await o.dispatcher.dispatch(task, p)
        assert att.state is JobState.FAILED and att.job_id is None
        assert att.stdout is None and att.workdir is None  # no folder named after `$SCRATCH`
        assert (att.reason or "").startswith(StorageUnread.PREFIX)
        assert (await o.book.load_attempts(task_id))[-1].state is JobState.FAILED
        assert adapter.calls == {"roots": 1}, n  # one read for both tasks (within 5 s)


async def _refuse(command: Command) -> CommandResult:
    raise TransportError("ssh: connect to host vista: Connection refused")


def _placed_on_a_scratch_site() -> tuple[Placement, SiteAdapter]:
    """A placement as the placer hands it to dispatch, on a site whose only root is `$SCRATCH`
    and whose login shell does not answer."""
    sites, snap = paper_world()
    p = place(env(gpus=4, cpus=8, wall_time="1h"), PlacementInputs(snap, sites, Policy(), now=NOW))
    assert isinstance(p, Placement)
    site = sites[p.site]
    scratch = (StorageRoot(name="scratch", path="$SCRATCH"),)
    profile = site.profile.model_copy(update={"storage": scratch})
    adapter = SiteAdapter(
        Site(profile=profile, user=site.user), LocalTransport(TransportSpec(kind="local"))
    )
    adapter.transport.run = _refuse  # type: ignore[method-assign]
    return p, adapter


def test_a_site_without_variable_roots_needs_no_call() -> None:
    profile = load_profiles()["delta"]
    assert not any(r.path.startswith("$") for r in profile.storage)
    site = Site(profile=profile, user=UserSiteConfig())
    adapter = SiteAdapter(site, LocalTransport(TransportSpec(kind="local")))
    assert replace(site).name == "delta"
    assert Dispatcher._workbase(adapter).endswith(f"/{adapter.login}/fedhpc")
