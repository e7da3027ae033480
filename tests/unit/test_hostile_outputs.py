"""`outputs` confined exactly like `workdir`: get_result reports each output's size, so a path
outside the task's folder and the storage roots was an existence oracle (`/etc/passwd`,
`/proc/self/environ`). Refused by field at submit, dropped by placement, checked at dispatch
against the roots the site's shell expands, and never read by get_result."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from fedhpc.adapters.site import SiteAdapter, WorkdirFailed
from fedhpc.adapters.transports.local import LocalTransport
from fedhpc.collector import Collector
from fedhpc.daemon.sitenames import check_request_sites
from fedhpc.domain.config import Site, UserSiteConfig
from fedhpc.domain.site import StorageRoot, TransportSpec
from fedhpc.ops.tasks import SubmitTaskRequest
from fedhpc.ops.workdir import OutputOutside
from fedhpc.orchestrator.site_paths import check_outputs as _check_outputs
from fedhpc.orchestrator.site_paths import outside_roots
from fedhpc.orchestrator.workdirs import sites_without_all
from fedhpc.profiles import load_profiles
from fedhpc.store import Store
from tests.unit.test_placement_world import NOW, cpu_partition, env, profile, site


def _request(*outputs: str) -> SubmitTaskRequest:
    return SubmitTaskRequest.model_validate(
        {"command": ["true"], "envelope": {}, "outputs": list(outputs)}
    )


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("/", "is not a file the task writes"),
        ("//server/share/x", "empty path component"),
        ("~/x", "'~' is not expanded"),
        (".", "is not a file the task writes"),
        ("a/./b", "'.' components are ambiguous"),
        ("../x", "'..'"),
    ],
)
def test_outputs_that_escape_or_name_no_file_are_refused_on_their_field(
    bad: str, says: str
) -> None:
    with pytest.raises(ValidationError) as err:
        _request("ok.txt", bad)
    (issue,) = err.value.errors()
    assert issue["loc"] == ("outputs", 1)
    assert says in issue["msg"]
    assert _request("ok.txt", "run/a.csv", "/scratch/me/a.csv").outputs[1] == "run/a.csv"


def _collector(store: Store) -> Collector:
    roots = (StorageRoot(name="scratch", path="/scratch"),)
    sites = {
        "alpha": site(profile("alpha", cpu_partition("cpu"), storage=roots)),
        "beta": site(profile("beta", cpu_partition("cpu"))),
    }
    return Collector(sites, {}, store, clock=lambda: NOW)


async def test_absolute_outputs_outside_every_storage_root_are_refused_at_the_door(
    store: Store,
) -> None:
    collector = _collector(store)
    outputs = ("/etc/passwd", "a.csv", "/scratch/me/b.csv", "/proc/self/environ")
    with pytest.raises(OutputOutside) as err:
        check_request_sites(collector, envelope=env(cpus=1), outputs=outputs)
    body = err.value.as_dict()
    assert (body["code"], err.value.kind.value) == ("output_outside", "validation")
    assert [f["field"] for f in body["fields"]] == ["outputs[0]", "outputs[3]"]
    assert "alpha: /scratch; beta: none" in body["fields"][0]["reason"]
    check_request_sites(collector, envelope=env(cpus=1), outputs=("a.csv", "/scratch/me/b"))
    # Placement keeps a task with an absolute output on the sites whose roots hold it.
    assert sites_without_all((None, "/scratch/me/b", "c"), collector.sites) == {"beta"}


def _vista(scratch: Path) -> SiteAdapter:
    spec = TransportSpec(kind="local", env={"SCRATCH": str(scratch), "WORK": ""})
    profile = load_profiles()["vista"].model_copy(update={"transport": spec, "local_test": True})
    return SiteAdapter(Site(profile=profile, user=UserSiteConfig()), LocalTransport(spec))


async def test_an_absolute_output_outside_the_expanded_roots_fails_dispatch_and_is_never_read(
    tmp_path: Path,
) -> None:
    """A `$SCRATCH` root may hold any path until the site's shell expands it: the door lets
    `/etc/passwd` through for Vista, so dispatch decides, like for an absolute workdir."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    adapter = _vista(scratch)
    assert outside_roots(adapter, ["/etc/passwd"]) == {"/etc/passwd"}  # roots unread: none
    await adapter.read_roots()
    inside = f"{scratch}/run/out.csv"
    _check_outputs(adapter, ["rel.csv", inside])
    with pytest.raises(WorkdirFailed) as err:
        _check_outputs(adapter, [inside, "/etc/passwd"])
    assert err.value.message.startswith(f"{WorkdirFailed.PREFIX} on vista: outputs[1] /etc/")
    assert str(scratch) in err.value.message
    assert outside_roots(adapter, ["rel", inside, "/etc/passwd"]) == {"/etc/passwd"}
