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
from tests.integration.daemon_util import drain, running

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
    async with running(tmp_path / "h", **SLOW) as client:
        handle = await client.submit_task(
            SubmitTaskRequest(command=("sleep", "1"), envelope=env, fixed_site="devanvil")
        )
        assert handle.state is JobState.SUBMITTED and handle.job_id, handle
        with anyio.fail_after(90):  # Slurm ran it and squeue no longer lists it
            while True:
                out = fed.run("devanvil", "squeue", "--noheader", f"--jobs={handle.job_id}")
                if not out.stdout.strip():
                    break
                await anyio.sleep(0.5)
        ended = fed.run("devanvil", "sacct", "-n", "-X", "-P", "-o", "State", "-j", handle.job_id)
        with pytest.raises(FedError) as refused:
            await client.replan(ReplanRequest(task_id=handle.task_id, envelope=env))
        assert refused.value.code == "usage", refused.value
        message = str(refused.value)
        assert f"its job {handle.job_id} has left devanvil's queue" in message, (message, ended)
        result = await client.get_result(ResultRequest(task_id=handle.task_id))
        assert [(a.n, a.superseded) for a in result.attempts] == [(1, False)], result.attempts
        # No second job: the only fedhpc job devanvil ever saw for it is the first one.
        jobs = fed.run("devanvil", "squeue", "--noheader", "--format=%i|%j").stdout
        assert result.attempts[0].job_name not in jobs, jobs
