"""replan against real Slurm (the local test federation, through a real daemon): a job that
started and ended between two probes has left `squeue`, and replan must not read its absence as
'not started' (it superseded the attempt and ran the job again)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from fedhpc.domain import JobState, ResourceEnvelope
from fedhpc.errors import FedError
from fedhpc.ops.tasks import ReplanRequest, ResultRequest, SubmitTaskRequest
from tests.integration.daemon_util import drain, job_id_of, running

pytestmark = pytest.mark.devfed

SLOW = {"FEDHPC_REFRESH_S": "600", "FEDHPC_CYCLE_S": "600"}  # no probe sees the job at all


@pytest.fixture
def fed(devfed: Any) -> Iterator[Any]:
    drain(devfed)
    yield devfed
    drain(devfed)


async def test_replan_refuses_a_job_that_ended_between_two_probes(fed: Any, tmp_path: Path) -> None:
    env = ResourceEnvelope.model_validate(
        {"cpus": {"min": 1, "max": 1}, "wall_time": {"min": "5m"}}
    )
    # A control cycle that looked while the job ran would make this a different test (replan
    # of a running task), and one follows each daemon's start (after its accounting read, so
    # it may look before or after a submission). So the job is submitted while devanvil's
    # nodes are drained, the daemon restarted, and its first cycle seen to look at the job
    # (waiting, never running); the next cycle is 600 s away when the nodes come back: the
    # job runs and ends with nothing looking.
    home = tmp_path / "h"
    nodes = sorted(set(fed.run("devanvil", "sinfo", "-h", "-N", "-o", "%N").stdout.split()))
    update = ["scontrol", "update", f"nodename={','.join(nodes)}"]
    async with running(home, **SLOW) as client:
        drain = fed.run("devanvil", *update, "state=drain", "reason=fedhpc-replan-test")
        assert nodes and drain.returncode == 0, drain.stderr
        try:
            handle = await client.submit_task(
                SubmitTaskRequest(command=("sleep", "1"), envelope=env, fixed_site="devanvil")
            )
            job_id = await job_id_of(client, handle.task_id)  # answered on placement
        except BaseException:
            fed.run("devanvil", *update, "state=resume")
            raise
    assert handle.state is JobState.SUBMITTED, handle
    try:
        async with running(home, **SLOW) as client:
            with anyio.fail_after(60):  # the restarted daemon's first cycle asks devanvil
                while not _status_calls(await client.health()):
                    await anyio.sleep(0.1)
            await anyio.sleep(1)  # its squeue answered (the call is counted as it is made)
            seen = await client.get_result(ResultRequest(task_id=handle.task_id))
            assert seen.state in {JobState.SUBMITTED, JobState.PENDING}, seen  # never running
            fed.run("devanvil", *update, "state=resume")
            await _ended_unseen(fed, client, handle.task_id, job_id, env)
    finally:
        fed.run("devanvil", *update, "state=resume")


def _status_calls(health: dict[str, Any]) -> int:
    return int(health["remote_calls"]["devanvil"]["total"].get("status", 0))


async def _ended_unseen(
    fed: Any, client: Any, task_id: str, job_id: str, env: ResourceEnvelope
) -> None:
    """The job ran and ended between two looks: replan must not read its absence as 'not
    started'."""
    with anyio.fail_after(90):  # Slurm ran it and squeue no longer lists it
        while True:
            out = fed.run("devanvil", "squeue", "--noheader", f"--jobs={job_id}")
            if not out.stdout.strip():
                break
            await anyio.sleep(0.5)
    ended = fed.run("devanvil", "sacct", "-n", "-X", "-P", "-o", "State", "-j", job_id)
    with pytest.raises(FedError) as refused:
        await client.replan(ReplanRequest(task_id=task_id, envelope=env))
    assert refused.value.code == "usage", refused.value
    message = str(refused.value)
    assert f"its job {job_id} has left devanvil's queue" in message, (message, ended)
    result = await client.get_result(ResultRequest(task_id=task_id))
    assert [(a.n, a.superseded) for a in result.attempts] == [(1, False)], result.attempts
    # No second job: the only fedhpc job devanvil ever saw for it is the first one.
    jobs = fed.run("devanvil", "squeue", "--noheader", "--format=%i|%j").stdout
    assert result.attempts[0].job_name not in jobs, jobs
