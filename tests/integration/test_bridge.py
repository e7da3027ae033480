"""The resume bridge through a real daemon on the local federation: a command runtime is
resumed once per event, also when the daemon is killed mid-delivery; failures dead-letter."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.domain import ResourceEnvelope
from fedhpc.ops.continuations import ContinuationSpec, Runtime
from fedhpc.ops.tasks import SubmitTaskRequest
from fedhpc.settings.daemon import DaemonSettings
from tests.integration.daemon_util import running, start, stop

pytestmark = pytest.mark.devfed

ENV = ResourceEnvelope.model_validate({"wall_time": {"min": "5m"}})


def _resume_into(log: Path, *, delay: float = 0) -> ContinuationSpec:
    # The "agent": appends what it was woken with; slow on purpose when asked.
    script = f'sleep {delay}; cat >> "$1"; echo >> "$1"'
    return ContinuationSpec(
        runtime=Runtime.COMMAND, command=("bash", "-c", script, "agent", str(log))
    )


async def _delivered(client: DaemonClient, n: int, limit: float = 90) -> None:
    with anyio.fail_after(limit):
        while len([d for d in await client.deliveries() if d.state == "delivered"]) < n:
            await anyio.sleep(0.3)


async def test_a_finished_task_resumes_its_agent_once_with_the_payload(
    devfed: Any, tmp_path: Path
) -> None:
    log = tmp_path / "agent.log"
    async with running(tmp_path / "h") as client:
        h = await client.submit_task(
            SubmitTaskRequest(command=("sleep", "1"), envelope=ENV, continuation=_resume_into(log))
        )
        await _delivered(client, 1)
        await anyio.sleep(2)  # more cycles: no second resume
        (line,) = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
        assert line["task_id"] == h.task_id
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


async def test_a_failing_runtime_is_dead_lettered_with_its_output_then_redriven_once(
    devfed: Any, tmp_path: Path
) -> None:
    fixed, log = tmp_path / "fixed", tmp_path / "agent.log"
    script = (
        'test -e "$1" || { echo nope-out; echo nope-err >&2; exit 7; }; cat >> "$2"; echo >> "$2"'
    )
    argv = ("bash", "-c", script, "agent", str(fixed), str(log))
    spec = ContinuationSpec(runtime=Runtime.COMMAND, command=argv)
    env = {"FEDHPC_BRIDGE_ATTEMPTS": "3", "FEDHPC_BRIDGE_BACKOFF_S": "0.2"}
    async with running(tmp_path / "h", **env) as client:
        h = await client.submit_task(
            SubmitTaskRequest(command=("true",), envelope=ENV, continuation=spec)
        )
        with anyio.fail_after(90):
            while not (dead := await client.deliveries(("dead",))):
                await anyio.sleep(0.3)
        assert dead[0].attempts == 3
        reason = dead[0].last_error or ""
        assert "exit 7" in reason and "nope-out" in reason and "nope-err" in reason
        assert not log.exists()
        # the cause is fixed; a redrive delivers it once, and a second redrive finds nothing
        fixed.touch()
        out = await client.retry_deliveries([dead[0].id])
        assert out == {"retried": [dead[0].id], "not_dead": []}
        await _delivered(client, 1)
        again = await client.retry_deliveries([dead[0].id])
        assert again == {"retried": [], "not_dead": [dead[0].id]}
        await anyio.sleep(2)
    (line,) = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
    assert line["task_id"] == h.task_id


def until(epoch: float) -> str:
    """A job body that ends at `epoch` (within 0.1 s), whenever it started."""
    return f"while [ $(date +%s%N) -lt {int(epoch * 1e9)} ]; do sleep 0.05; done"


async def test_one_resume_at_a_time_per_continuation_in_event_order(
    devfed: Any, tmp_path: Path
) -> None:
    """Three tasks ending together, one (slow) command continuation: its runs never overlap
    and each event arrives once, in event order."""
    log = tmp_path / "agent.log"
    script = (
        'echo "start $(date +%s.%N)" >> "$1"; sleep 1; cat >> "$1"; echo >> "$1"; '
        'echo "end $(date +%s.%N)" >> "$1"'
    )
    spec = ContinuationSpec(runtime=Runtime.COMMAND, command=("bash", "-c", script, "a", str(log)))
    async with running(tmp_path / "h") as client:
        sync = until(time.time() + 5)  # all three submitted and started well before
        for i in range(3):  # distinct commands: an identical request is the same task
            await client.submit_task(
                SubmitTaskRequest(
                    command=("bash", "-c", f"{sync}; echo {i}"), envelope=ENV, continuation=spec
                )
            )
        await _delivered(client, 3, limit=120)
        rows = await client.deliveries()
    lines = log.read_text().splitlines()
    marks = [x.split() for x in lines if x.startswith(("start", "end"))]
    assert [m[0] for m in marks] == ["start", "end"] * 3  # never two at once
    events = [json.loads(x) for x in lines if x.startswith("{")]
    assert sorted(e["delivery"] for e in events) == sorted(d.id for d in rows)
    seqs = [int(e["delivery"].split("-")[0][1:]) for e in events]
    assert seqs == sorted(seqs)
