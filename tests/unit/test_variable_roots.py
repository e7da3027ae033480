"""A storage root given as a login-shell variable (TACC's `$SCRATCH`, `$WORK`) is expanded by
the site's own shell, through a real local transport (bash), before any folder is named: an
unset variable is one clear `workdir_failed` error, never a folder literally called `$SCRATCH`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from fedhpc.adapters.site import SiteAdapter, WorkdirFailed
from fedhpc.adapters.transports.base import TransportError
from fedhpc.adapters.transports.local import LocalTransport
from fedhpc.domain.config import Site, UserSiteConfig
from fedhpc.domain.site import TransportSpec
from fedhpc.orchestrator.dispatch import Dispatcher
from fedhpc.profiles import load_profiles


def _vista(env: dict[str, str], **user: str) -> SiteAdapter:
    """The shipped Vista profile (roots `$HOME`, `$WORK`, `$SCRATCH`) over a local shell."""
    spec = TransportSpec(kind="local", env=env)
    profile = load_profiles()["vista"].model_copy(update={"transport": spec})
    site = Site(profile=profile, user=UserSiteConfig(**user))  # type: ignore[arg-type]
    return SiteAdapter(site, LocalTransport(spec))


async def test_scratch_is_expanded_by_the_login_shell_and_is_the_users_own(tmp_path: Path) -> None:
    adapter = _vista({"SCRATCH": f"{tmp_path}/scratch/07/me/", "WORK": "/work/07/me"})
    with pytest.raises(WorkdirFailed, match=r"\$SCRATCH not read yet"):
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
    """Neither a failing shell nor a failing transport reads as 'every variable unset'."""
    adapter = _vista({"PATH": "/nonexistent"})  # bash cannot be found: the command fails
    await adapter.read_roots()
    assert adapter.roots is None
    adapter.transport = LocalTransport(TransportSpec(kind="local", options={"attempts": "1"}))
    adapter.transport.run = _refuse  # type: ignore[method-assign]
    await adapter.read_roots()
    assert adapter.roots is None
    with pytest.raises(WorkdirFailed, match="not read yet"):
        adapter.root_path("$SCRATCH")


async def _refuse(command: object) -> object:
    raise TransportError("ssh: connect to host vista: Connection refused")


def test_a_site_without_variable_roots_needs_no_call() -> None:
    profile = load_profiles()["delta"]
    assert not any(r.path.startswith("$") for r in profile.storage)
    site = Site(profile=profile, user=UserSiteConfig())
    adapter = SiteAdapter(site, LocalTransport(TransportSpec(kind="local")))
    assert replace(site).name == "delta"
    assert Dispatcher._workbase(adapter).endswith(f"/{adapter.login}/fedhpc")
