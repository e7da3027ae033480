"""A job script named by its path (`submit_task(script="/path")`) is read at the site that holds
it; at a per-person site (`identity = "person"`) as the person asking, never as the service:
otherwise anyone signed in reads files of the service's own identity there."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from fedhpc.daemon.scripts import read_script_file
from fedhpc.domain.site import StorageRoot
from fedhpc.globus_auth.people import acting_person
from fedhpc.orchestrator.people import per_person
from tests.unit.test_placement_world import cpu_partition, profile, site

ALICE = "https://auth.globus.org|u-alice"


class _Site:
    def __init__(self) -> None:
        self.read_as: list[str | None] = []

    async def head(self, path: str, most: int) -> tuple[str, bool]:
        self.read_as.append(acting_person())
        return "#!/bin/bash\n#SBATCH -t 10\necho hi\n", False


def _state(identity: str) -> tuple[Any, _Site]:
    p = profile("alpha", cpu_partition("cpu"))
    p = p.model_copy(update={"storage": (StorageRoot(name="scratch", path="/scratch"),)})
    s = site(p, identity=identity)
    adapter = _Site()
    collector = SimpleNamespace(sites={"alpha": s}, adapters={"alpha": adapter})
    return cast(Any, SimpleNamespace(collector=collector)), adapter


async def test_a_script_at_a_per_person_site_is_read_as_the_person_asking() -> None:
    state, adapter = _state("person")
    assert per_person(state.collector.sites["alpha"])
    got = await read_script_file(state, "/scratch/job.sh", owner=ALICE)
    assert got.site == "alpha" and adapter.read_as == [ALICE]


async def test_elsewhere_and_for_the_operator_a_script_is_read_as_the_service() -> None:
    state, adapter = _state("service")
    await read_script_file(state, "/scratch/job.sh", owner=ALICE)
    state_p, adapter_p = _state("person")
    await read_script_file(state_p, "/scratch/job.sh")
    assert adapter.read_as == [None] and adapter_p.read_as == [None]
