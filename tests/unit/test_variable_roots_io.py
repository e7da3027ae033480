"""Storage roots given as login-shell variables (Vista's `$HOME`, `$WORK`, `$SCRATCH`) outside job
dispatch: data references, stage-out sources and absolute workdirs use the path the site's own
shell expanded (a real local transport running bash, real copies by the local backend), never a
folder literally named `$SCRATCH`; an unset variable is one typed error naming the fix."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import anyio
import pytest

from fedhpc.adapters.site import SiteAdapter
from fedhpc.adapters.transports.local import LocalTransport
from fedhpc.domain.config import Site, UserSiteConfig
from fedhpc.domain.job import JobState
from fedhpc.domain.site import TransportSpec
from fedhpc.errors import ValidationFailed
from fedhpc.ops.data import MoveDataRequest, TransferState
from fedhpc.ops.tasks import SubmitTaskRequest
from fedhpc.ops.workdir import resolve_workdir, sites_holding
from fedhpc.orchestrator.records import TaskRecord
from fedhpc.orchestrator.service import Orchestrator
from fedhpc.orchestrator.site_paths import site_roots as _roots
from fedhpc.orchestrator.workdirs import sites_without
from fedhpc.placement import Placement, PlacementInputs, Policy, place
from fedhpc.profiles import load_profiles
from fedhpc.store import Store
from fedhpc.transfer.errors import OutsideRoot
from fedhpc.transfer.records import TransferRecord
from fedhpc.transfer.refs import locate
from fedhpc.transfer.service import TransferService
from tests.unit.test_placement_place import paper_world
from tests.unit.test_placement_world import NOW, env


def _vista(env: dict[str, str]) -> SiteAdapter:
    """The shipped Vista profile over a local shell, as a local-test site so that the local
    backend (real copies on this machine) moves its data."""
    spec = TransportSpec(kind="local", env=env)
    profile = load_profiles()["vista"].model_copy(update={"transport": spec, "local_test": True})
    return SiteAdapter(Site(profile=profile, user=UserSiteConfig()), LocalTransport(spec))


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await Store.open(tmp_path / "home" / "fedhpc.db")
    yield s
    await s.close()


@pytest.fixture
def roots(tmp_path: Path) -> dict[str, Path]:
    out = {n: tmp_path / n / "07" / "me" for n in ("HOME", "WORK", "SCRATCH")}
    for p in out.values():
        p.mkdir(parents=True)
    return out


def _service(store: Store, adapter: SiteAdapter, tmp_path: Path) -> TransferService:
    sites = {adapter.name: adapter.site}
    return TransferService(store, sites, {adapter.name: adapter}, home=tmp_path / "home")


async def _settle(svc: TransferService, transfer_id: str) -> TransferRecord:
    with anyio.fail_after(20):
        while not (rec := await svc.load(transfer_id)).state.terminal:
            await svc.tick()
            await anyio.sleep(0.05)
    return rec


def _no_variable_folders(tmp_path: Path) -> None:
    assert not [p for p in tmp_path.rglob("*") if "$" in p.name]
    assert not list(Path.cwd().glob("$*"))  # a relative `$SCRATCH/...` would land here


async def test_move_data_copies_between_the_expanded_work_and_scratch_roots(
    store: Store, roots: dict[str, Path], tmp_path: Path
) -> None:
    adapter = _vista({n: f"{p}/" for n, p in roots.items() if n != "HOME"})
    (roots["WORK"] / "in").mkdir()
    (roots["WORK"] / "in/a.dat").write_bytes(os.urandom(4096))
    svc = _service(store, adapter, tmp_path)
    handle = await svc.move_data(
        MoveDataRequest(source="vista:work/in/a.dat", destination="vista:scratch/run/a.dat")
    )
    rec = await _settle(svc, handle.transfer_id)
    assert rec.state is TransferState.SUCCEEDED, rec.error
    copied = roots["SCRATCH"] / "run/a.dat"
    assert copied.read_bytes() == (roots["WORK"] / "in/a.dat").read_bytes()
    assert rec.destination.root_path == str(roots["SCRATCH"])
    assert rec.destination.path == str(copied)
    assert rec.source is not None
    assert rec.source.path == str(roots["WORK"] / "in/a.dat")
    assert any("roots expanded at the sites" in line for line in rec.trace)
    assert adapter.calls["roots"] == 1  # read once, then known
    _no_variable_folders(tmp_path)


async def test_an_unset_scratch_fails_the_transfer_with_a_typed_error_and_makes_nothing(
    store: Store, roots: dict[str, Path], tmp_path: Path
) -> None:
    adapter = _vista({"WORK": str(roots["WORK"]), "SCRATCH": ""})
    (roots["WORK"] / "a.dat").write_text("alpha\n")
    svc = _service(store, adapter, tmp_path)
    handle = await svc.move_data(
        MoveDataRequest(source="vista:work/a.dat", destination="vista:scratch/a.dat")
    )
    rec = await svc.load(handle.transfer_id)
    assert rec.state is TransferState.FAILED
    assert rec.error is not None
    assert rec.error.code == "root_unexpanded"
    assert rec.error.message == (
        "vista: storage root $SCRATCH: $SCRATCH is not set in the login environment"
    )
    assert "fedhpc doctor vista" in rec.error.hint
    _no_variable_folders(tmp_path)


async def test_a_site_that_does_not_answer_the_read_holds_the_transfer_queued(
    store: Store, roots: dict[str, Path], tmp_path: Path
) -> None:
    adapter = _vista({"PATH": "/nonexistent"})  # bash cannot be found: the read fails
    (roots["WORK"] / "a.dat").write_text("alpha\n")
    svc = _service(store, adapter, tmp_path)
    handle = await svc.move_data(
        MoveDataRequest(source="vista:work/a.dat", destination="vista:scratch/a.dat")
    )
    rec = await svc.load(handle.transfer_id)
    assert (rec.state, rec.error, rec.backend_id) == (TransferState.QUEUED, None, None)
    assert adapter.roots is None
    assert rec.destination.path == "$SCRATCH/a.dat"  # as written until the site answers
    adapter.transport = LocalTransport(
        TransportSpec(
            kind="local", env={"WORK": str(roots["WORK"]), "SCRATCH": str(roots["SCRATCH"])}
        )
    )
    adapter._roots_tried = 0.0  # the next cycle, past the retry window
    rec = await _settle(svc, handle.transfer_id)
    assert rec.state is TransferState.SUCCEEDED, rec.error
    assert (roots["SCRATCH"] / "a.dat").read_text() == "alpha\n"
    _no_variable_folders(tmp_path)


async def test_a_variable_root_without_a_connection_to_expand_it_is_refused(
    store: Store, roots: dict[str, Path], tmp_path: Path
) -> None:
    adapter = _vista({})
    (roots["WORK"] / "a.dat").write_text("alpha\n")
    svc = TransferService(store, {"vista": adapter.site}, home=tmp_path / "home")  # no adapter
    handle = await svc.move_data(
        MoveDataRequest(source="vista:work/a.dat", destination="vista:scratch/a.dat")
    )
    rec = await svc.load(handle.transfer_id)
    assert rec.error is not None
    assert (rec.state, rec.error.code) == (TransferState.FAILED, "root_unexpanded")
    assert "$WORK" in rec.error.message
    _no_variable_folders(tmp_path)


async def test_a_stage_out_source_in_the_expanded_scratch_finds_its_root(
    store: Store, roots: dict[str, Path], tmp_path: Path
) -> None:
    adapter = _vista({n: str(p) for n, p in roots.items()})
    svc = _service(store, adapter, tmp_path)
    output = f"{roots['SCRATCH']}/fedhpc/t-1/out.dat"
    with pytest.raises(OutsideRoot):
        locate(adapter.site, output)  # the profile's literal `$SCRATCH` holds nothing
    expanded = await svc.roots.named(adapter.site)
    assert expanded == {n.lower(): str(p) for n, p in roots.items()}
    loc = locate(adapter.site, output, expanded)
    assert (loc.root, loc.root_path, loc.path) == ("scratch", str(roots["SCRATCH"]), output)


async def test_an_absolute_workdir_under_scratch_is_placed_and_checked_at_dispatch(
    roots: dict[str, Path],
) -> None:
    adapter = _vista({"SCRATCH": str(roots["SCRATCH"]), "WORK": ""})
    inside = f"{roots['SCRATCH']}/runs/x"
    # Placement cannot run a shell: a `$NAME` root may hold the path (dispatch decides).
    assert sites_holding(inside, [adapter.site.profile]) == {"vista"}
    assert sites_without(inside, {"vista": adapter.site}) == set()
    await adapter.read_roots()
    expanded = _roots(adapter)
    assert str(roots["SCRATCH"]) in expanded
    assert "$WORK (not expanded)" in expanded
    profile = adapter.site.profile
    assert resolve_workdir(inside, "/base/t1", profile, expanded) == inside
    with pytest.raises(ValidationFailed) as caught:
        resolve_workdir("/elsewhere/x", "/base/t1", profile, expanded)
    assert str(roots["SCRATCH"]) in caught.value.message
    assert "$WORK (not expanded)" in caught.value.message
    with pytest.raises(ValidationFailed):  # nor does an unset $WORK hold its literal name
        resolve_workdir("/work/x", "/base/t1", profile, expanded)


def test_plain_roots_are_unchanged() -> None:
    delta = load_profiles()["delta"]
    scratch = delta.storage[0].path
    assert sites_holding(f"{scratch}/x", [delta]) == {"delta"}
    assert sites_holding("/nowhere/x", [delta]) == set()


async def test_dispatch_fails_an_attempt_whose_workdir_is_outside_the_expanded_scratch(
    store: Store, roots: dict[str, Path]
) -> None:
    """Placement let the task through (a `$NAME` root may hold it); dispatch knows better, and
    the attempt fails before any folder or job exists, naming the expanded roots. Its placement
    still becomes the task's decision and provenance together: the provenance once stayed at
    an earlier placement (get_result answered a FALLBACK move with the fixed site's decision)."""
    sites, snap = paper_world()
    envelope = env(gpus=4, cpus=8, wall_time="1h")
    decision = place(envelope, PlacementInputs(snap, sites, Policy(), now=NOW))
    assert isinstance(decision, Placement)
    adapter = _vista({n: str(p) for n, p in roots.items()})
    o = Orchestrator(store, cast(Any, None), {decision.site: adapter}, clock=lambda: NOW)
    outside = f"{roots['SCRATCH'].parent}/other/x"  # a neighbour's scratch, not mine
    task = TaskRecord(
        id="t1",
        request=SubmitTaskRequest(command=("true",), envelope=envelope, workdir=outside),
        idempotency_key="k1",
        created_at=NOW,
        decision="an earlier placement",
    )
    att = await o.dispatcher.dispatch(task, decision)
    assert (att.state, att.job_id) == (JobState.FAILED, None)
    assert att.reason == (
        f"cannot create the job's folder on vista: workdir: {outside} is inside no "
        f"storage root of vista ({roots['HOME']}, {roots['WORK']}, {roots['SCRATCH']})"
    )
    assert adapter.calls["submit"] == 0
    assert not (roots["SCRATCH"] / "fedhpc").exists()
    assert (await o.book.load_attempts("t1"))[-1].state is JobState.FAILED
    saved = await o.book.load_task("t1")
    assert saved.decision.startswith("est. wait")
    assert saved.provenance is not None
    assert saved.provenance.decision.startswith(f"{decision.site}/{decision.partition} ")
