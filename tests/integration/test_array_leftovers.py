"""What job arrays leave behind, on the real local Slurm (issue 40): each element's own output
goes to its task's files, and the files Slurm itself writes per element (`arrays/%A_%a.out`
and `.err`) are removed once the element has ended; the children's own files stay."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from fedhpc.domain import JobState, ResourceEnvelope
from fedhpc.ops.tasks import GroupChild, ResultRequest, SubmitGroupRequest
from tests.integration.daemon_util import drain, running

pytestmark = pytest.mark.devfed

CHILDREN = 12


@pytest.fixture
def fed(devfed: Any) -> Iterator[Any]:
    drain(devfed)
    yield devfed
    drain(devfed)


async def test_an_arrays_scheduler_files_are_removed_once_its_elements_ended(
    fed: Any, tmp_path: Path
) -> None:
    home = tmp_path / "h"
    home.mkdir()
    off = "".join(f"[sites.{s}]\nenabled = false\n" for s in ("devdelta", "devdeltaai", "devvista"))
    (home / "config.toml").write_text(f"[sites.devanvil]\n{off}")
    env = ResourceEnvelope.model_validate({"cpus": {"min": 1, "max": 1}})
    children = tuple(GroupChild(command=("bash", "-c", f"echo child-{i}")) for i in range(CHILDREN))
    async with running(home, FEDHPC_SUBMITS_PER_CYCLE="100") as client:
        group = await client.submit_group(
            SubmitGroupRequest(objective="leftovers", children=children, envelope=env, spread=False)
        )
        with anyio.fail_after(120):
            while (view := await client.group(group.group_id, limit=CHILDREN)).state in (
                "running",
                "placing",
            ):
                await anyio.sleep(0.3)
        assert view.counts == {"completed": CHILDREN}
        results = [await client.get_result(ResultRequest(task_id=k.task_id)) for k in view.children]
    jobs = [r.attempts[-1].job_id or "" for r in results]
    assert all("_" in j for j in jobs)  # elements of an array
    own = [Path(next(o.path for o in r.outputs if o.kind == "stdout")) for r in results]
    arrays = own[0].parent.parent / "arrays"
    assert arrays.is_dir()  # where Slurm wrote its own files for each element
    for i, r in enumerate(results):
        assert r.state is JobState.COMPLETED
        assert own[i].read_text().strip() == f"child-{i}"  # the child's own: kept
    left = {p.name for p in arrays.iterdir()} & {f"{j}.{x}" for j in jobs for x in ("out", "err")}
    assert left == set()
