"""Job arrays on the real local federation (issue 40): a 1,000-child group runs on Slurm as a
few `sbatch --array` submissions, each child keeping its own task, job id (`ARRAY_INDEX`),
state and output; one child re-placed by `replan` leaves its array (its element alone is
cancelled) and runs elsewhere."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.domain import JobState, ResourceEnvelope
from fedhpc.ops.task_views import ChildView
from fedhpc.ops.tasks import GroupChild, ReplanRequest, ResultRequest, SubmitGroupRequest
from tests.integration.daemon_util import drain, running

pytestmark = pytest.mark.devfed

CHILDREN = 1000
FIRST_WAVE = 128  # these sleep a little, so the last child is still pending when it is moved


@pytest.fixture
def fed(devfed: Any) -> Iterator[Any]:
    drain(devfed)
    yield devfed
    drain(devfed)


def _home(tmp_path: Path) -> Path:
    """devanvil and devdelta only (the moved child's other site)."""
    home = tmp_path / "h"
    home.mkdir()
    off = "".join(f"[sites.{s}]\nenabled = false\n" for s in ("devdeltaai", "devvista"))
    (home / "config.toml").write_text(f"[sites.devanvil]\n[sites.devdelta]\n{off}")
    return home


async def _children(client: DaemonClient, gid: str) -> list[ChildView]:
    out: list[ChildView] = []
    after: str | None = None
    while True:
        view = await client.group(gid, after=after, limit=500)
        out += view.children
        if view.next_after is None:
            return out
        after = view.next_after


# A thousand children through real Slurm: 52-66 s in six runs.
@pytest.mark.budget(70)
async def test_a_thousand_children_run_as_arrays_and_a_moved_child_leaves_its_array(
    fed: Any, tmp_path: Path
) -> None:
    env = ResourceEnvelope.model_validate(
        {"wall_time": {"min": "5m"}, "cpus": {"min": 1, "max": 1}, "sites_include": ["devanvil"]}
    )
    commands = [
        ("bash", "-c", 'sleep "$1"; echo "child-$2"', "c", "4" if i < FIRST_WAVE else "0", str(i))
        for i in range(CHILDREN)
    ]
    async with running(_home(tmp_path), FEDHPC_SUBMITS_PER_CYCLE="1000") as client:
        before = (await client.health())["remote_calls"].get("devanvil", {}).get("total", {})
        group = await client.submit_group(
            SubmitGroupRequest(
                objective="a sweep as job arrays",
                children=tuple(GroupChild(command=c) for c in commands),
                envelope=env,
                spread=False,
            )
        )
        gid = group.group_id
        # The last child, still pending behind the first wave: held at Slurm, so it cannot
        # start before it is moved, then moved to devdelta.
        with anyio.fail_after(90):
            while True:
                kids = await _children(client, gid)
                if all(k.job_id for k in kids):
                    break
                await anyio.sleep(0.5)
        last = kids[-1]
        assert last.job_id is not None and "_" in last.job_id
        fed.run("devanvil", "scontrol", "hold", last.job_id)
        moved = await client.replan(
            ReplanRequest(
                task_id=last.task_id,
                envelope=env.model_copy(update={"sites_include": ("devdelta",)}),
            )
        )
        assert moved.site == "devdelta"

        with anyio.fail_after(100):
            while True:
                view = await client.group(gid, limit=1)
                if view.state != "running" and view.state != "placing":
                    break
                await anyio.sleep(0.3)
        assert view.counts == {"completed": CHILDREN}
        kids = await _children(client, gid)
        after = (await client.health())["remote_calls"]["devanvil"]["total"]
        # Each child's own output, in its own files (a sample of them, and the moved one).
        sample = [*range(0, CHILDREN, 37), CHILDREN - 1]
        for i in sample:
            r = await client.get_result(ResultRequest(task_id=kids[i].task_id))
            assert r.state is JobState.COMPLETED
            assert (r.preview or "").strip() == f"child-{i}"
        moved_result = await client.get_result(ResultRequest(task_id=last.task_id))

    # Every child but the moved one ran as an element of an array on devanvil.
    arrays: dict[str, set[int]] = {}
    for k in kids[:-1]:
        assert k.site == "devanvil" and k.job_id is not None
        parent, _, index = k.job_id.partition("_")
        arrays.setdefault(parent, set()).add(int(index))
    assert sum(len(v) for v in arrays.values()) == CHILDREN - 1
    assert len(arrays) <= 40  # a few arrays of many children, not 1,000 jobs
    assert after.get("submit", 0) - before.get("submit", 0) <= len(arrays) + 1
    # The moved child: its element on devanvil was cancelled alone; it completed on devdelta.
    first, second = moved_result.attempts
    assert (first.site, first.job_id, first.superseded) == ("devanvil", last.job_id, True)
    assert (second.site, second.state) == ("devdelta", JobState.COMPLETED)
    assert kids[-1].site == "devdelta"
    sacct = fed.run(
        "devanvil", "sacct", "-n", "-X", "-P", "-j", str(last.job_id), "--format=JobID,State"
    ).stdout
    assert f"{last.job_id}|CANCELLED" in sacct
