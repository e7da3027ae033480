"""Cancelling a whole group on the real local federation: one `cancel(<group id>)` ends every
child still live (those with a job at the scheduler, those held in fedhpc by the partition's
per-user limit), kills their jobs with one scancel for all of them, keeps the results of the
children that had ended, and wakes nobody; a second cancel says nothing was left."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.domain import JobState, ResourceEnvelope
from fedhpc.ops.continuations import ContinuationSpec, Runtime
from fedhpc.ops.tasks import CancelRequest, GroupChild, ResultRequest, SubmitGroupRequest
from tests.integration.daemon_util import running, settled
from tests.integration.test_holdback import fed, limited_home  # noqa: F401 (fed: a fixture)

pytestmark = pytest.mark.devfed

LIMIT = 3
CHILDREN = 12


async def _job_ids(client: DaemonClient, ids: list[str]) -> dict[str, str]:
    """The children with a job at the scheduler now: task id -> job id."""
    out = {}
    for tid in ids:
        result = await client.get_result(ResultRequest(task_id=tid))
        live = [
            a for a in result.attempts if a.job_id and not a.state.terminal and not a.superseded
        ]
        if live:
            out[tid] = str(live[-1].job_id)
    return out


@pytest.mark.usefixtures("fed")  # every cluster drained before and after
async def test_cancel_of_a_group_ends_every_live_child_with_one_scancel_and_wakes_nobody(
    devfed: Any, tmp_path: Path
) -> None:
    home = limited_home(tmp_path, LIMIT)
    env = ResourceEnvelope.model_validate(
        {"wall_time": {"min": "5m"}, "cpus": {"min": 1, "max": 1}, "sites_include": ["devanvil"]}
    )
    agent = tmp_path / "agent"  # a resume would write here
    wake = ContinuationSpec(
        runtime=Runtime.COMMAND,
        command=("bash", "-c", 'cat >> "$1"', "agent", str(agent)),
    )
    # Child 0 ends at once (its result is kept); the others would run for five minutes.
    commands = [("true",)] + [("sleep", "300")] * (CHILDREN - 1)
    async with running(home) as client:
        group = await client.submit_group(
            SubmitGroupRequest(
                objective="a sweep stopped half way",
                children=tuple(GroupChild(command=c, name=f"c{i}") for i, c in enumerate(commands)),
                envelope=env,
                continuation=wake,
            )
        )
        gid, ids = group.group_id, [c.task_id for c in group.children]
        # Wait for the sweep's steady state: child 0 done, LIMIT jobs at the scheduler, the
        # rest held in fedhpc by the per-user limit.
        with anyio.fail_after(90):
            while True:
                first = await client.get_result(ResultRequest(task_id=ids[0]))
                jobs = await _job_ids(client, ids)
                if first.state is JobState.COMPLETED and len(jobs) == LIMIT:
                    break
                await anyio.sleep(0.5)
        calls = (await client.health())["remote_calls"]["devanvil"]["total"].get("cancel", 0)

        answer = await client.cancel(CancelRequest(task_id=gid))

        assert answer.task_id == gid
        assert answer.state is JobState.CANCELLED
        live = CHILDREN - 1
        assert answer.decision == (
            f"group {gid}: cancelled {live} of {CHILDREN} children ({LIMIT} with a job at a "
            f"scheduler, {live - LIMIT} still queued in fedhpc); 1 had already ended and keep "
            "their results"
        )
        assert "nothing will wake you" in answer.next
        # One scancel for the three jobs, and the scheduler holds none of them any more.
        health = await client.health()
        assert health["remote_calls"]["devanvil"]["total"]["cancel"] == calls + 1
        with anyio.fail_after(30):
            while True:
                out = devfed.run(
                    "devanvil", "squeue", "-h", "-t", "PD,R", "-j", ",".join(jobs.values())
                )
                if not out.stdout.strip():
                    break
                await anyio.sleep(0.3)
        view = await client.group(gid)
        assert view.state == "failed"  # one completed, the rest cancelled
        assert view.counts == {"completed": 1, "cancelled": live}
        kept = await client.get_result(ResultRequest(task_id=ids[0]))
        assert kept.state is JobState.COMPLETED
        # Nothing more happens: no child is placed again, no round event, no resume.
        delivered = await settled(client, cycles=2)
        assert delivered == []
        assert (await client.group(gid)).counts == {"completed": 1, "cancelled": live}
        assert await _job_ids(client, ids) == {}
        assert not agent.exists()
        # The same cancel again: nothing was left to cancel, and it says so.
        again = await client.cancel(CancelRequest(task_id=gid))
    assert again.state is JobState.FAILED
    assert again.decision == (
        f"group {gid}: all {CHILDREN} children had already ended ({live} cancelled, 1 completed)"
    )
    assert again.next.startswith("Nothing was cancelled")
