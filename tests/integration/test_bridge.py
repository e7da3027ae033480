"""The resume bridge through a real daemon on the local federation: a command runtime is
resumed once per event, also when the daemon is killed mid-delivery; failures dead-letter."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from fedhpc.client import DaemonClient
from fedhpc.daemon.settings import DaemonSettings
from fedhpc.domain import ResourceEnvelope
from fedhpc.ops.continuations import ContinuationSpec, Runtime
from fedhpc.ops.tasks import SubmitTaskRequest
from tests.integration.daemon_util import running, start, stop

pytestmark = pytest.mark.devfed

ENV = ResourceEnvelope.model_validate({"wall_time": {"min": "5m"}})


def _resume_into(log: Path, *, delay: float = 0) -> ContinuationSpec:
    # The "agent": appends what it was woken with; slow on purpose when asked.
    script = f'sleep {delay}; cat >> "$1"; echo >> "$1"'
    return ContinuationSpec(runtime=Runtime.COMMAND,
                            command=("bash", "-c", script, "agent", str(log)))  # fmt: skip


async def _delivered(client: DaemonClient, n: int, limit: float = 90) -> None:
    with anyio.fail_after(limit):
        while len([d for d in await client.deliveries() if d.state == "delivered"]) < n:
            await anyio.sleep(0.3)


async def test_a_finished_task_resumes_its_agent_once_with_the_payload(
    devfed: Any, tmp_path: Path
) -> None:
    log = tmp_path / "agent.log"
    async with running(tmp_path / "h") as client:
        h = await client.submit_task(SubmitTaskRequest(
            command=("sleep", "1"), envelope=ENV, continuation=_resume_into(log)))  # fmt: skip
        await _delivered(client, 1)
        await anyio.sleep(2)  # more cycles: no second resume
        (line,) = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
        assert line["subject"] == h.task_id
        assert line["event"] == "task.terminal"
        assert line["state"] == "completed"
        (d,) = await client.deliveries()
        assert d.payload_bytes < 2048


async def test_killing_the_daemon_mid_delivery_still_resumes_exactly_once(
    devfed: Any, tmp_path: Path
) -> None:
    log = tmp_path / "agent.log"
    home = tmp_path / "h"
    settings = DaemonSettings.from_env(home=home)
    proc = start(home)
    try:
        async with DaemonClient(settings) as client:
            await client.wait_until_up(30)
            await client.refresh()
            slow = _resume_into(log, delay=4)
            await client.submit_task(
                SubmitTaskRequest(command=("true",), envelope=ENV, continuation=slow)
            )
            with anyio.fail_after(60):  # wait until the resume process is running
                while not [d for d in await client.deliveries() if d.state == "started"]:
                    await anyio.sleep(0.2)
            stop(proc, kill=True)
            proc = start(home)
            await client.wait_until_up(30)
            await _delivered(client, 1)
            await anyio.sleep(2)
    finally:
        stop(proc)
    assert len([x for x in log.read_text().splitlines() if x.strip()]) == 1


async def test_a_failing_runtime_is_retried_then_dead_lettered(devfed: Any, tmp_path: Path) -> None:
    env = {"FEDHPC_BRIDGE_ATTEMPTS": "3", "FEDHPC_BRIDGE_BACKOFF_S": "0.2"}
    async with running(tmp_path / "h", **env) as client:
        await client.submit_task(SubmitTaskRequest(
            command=("true",), envelope=ENV,
            continuation=ContinuationSpec(runtime=Runtime.COMMAND,
                                          command=("bash", "-c", "echo nope >&2; exit 7")),
        ))  # fmt: skip
        with anyio.fail_after(90):
            while not (dead := await client.deliveries(("dead",))):
                await anyio.sleep(0.3)
        assert dead[0].attempts == 3
        assert dead[0].last_error is not None
        assert "exited 7" in dead[0].last_error
