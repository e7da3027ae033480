"""A failed stage-in wakes the agent exactly once, with the failure: through a real daemon on
the local federation, the local transfer backend and the resume bridge's command runtime (the
"agent" appends each payload it is woken with to a file)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.domain import JobState, ResourceEnvelope
from fedhpc.errors import FedError
from fedhpc.ops.continuations import DEFAULT_WAKE_EVENTS, ContinuationSpec, Runtime
from fedhpc.ops.data import MoveDataRequest, StageOut
from fedhpc.ops.tasks import SubmitTaskRequest
from fedhpc.placement import PolicyKind
from tests.integration.daemon_util import running, settled, wait_terminal
from tests.skill_claims import resume_claims

pytestmark = pytest.mark.devfed

ENV = ResourceEnvelope.model_validate({"wall_time": {"min": "5m"}})
TRANSFER_EVENTS = ("transfer.succeeded", "transfer.failed", "transfer.blocked")


def _agent(log: Path, events: tuple[str, ...] = DEFAULT_WAKE_EVENTS) -> ContinuationSpec:
    return ContinuationSpec(
        runtime=Runtime.COMMAND,
        events=events,
        command=("bash", "-c", 'cat >> "$1"; echo >> "$1"', "agent", str(log)),
    )


def _woken(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(x) for x in log.read_text().splitlines() if x.strip()]


async def _settled(client: DaemonClient, n: int, limit: float = 90) -> None:
    """`n` deliveries done, then two more whole cycles and the bridge idle: nothing else
    arrives (`settled`, not a fixed sleep a slow daemon outlasts)."""
    with anyio.fail_after(limit):
        while len([d for d in await client.deliveries() if d.state == "delivered"]) < n:
            await anyio.sleep(0.3)
    assert len(await settled(client, cycles=2)) == n


async def test_a_stage_out_that_fails_wakes_the_waiting_tasks_agent_once(
    devfed: Any, tmp_path: Path
) -> None:
    log = tmp_path / "agent.log"
    run = "wake-" + uuid.uuid4().hex[:8]
    async with running(tmp_path / "h") as client:
        # The producer completes but never writes the file its stage-out names.
        pre = await client.submit_task(
            SubmitTaskRequest(
                command=("true",),
                envelope=ENV,
                policy=PolicyKind.FIXED_SITE,
                fixed_site="devanvil",
                stage_out=(
                    StageOut(source="missing.dat", destination=f"devvista:scratch/{run}/in.dat"),
                ),
                continuation=_agent(log),
            )
        )
        nxt = await client.submit_task(
            SubmitTaskRequest(
                command=("cat", "in.dat"),
                envelope=ENV,
                stage_in=pre.transfers,
                continuation=_agent(log),
            )
        )
        done = await wait_terminal(client, nxt.task_id)
        assert done.state is JobState.FAILED
        assert done.attempts == ()  # never dispatched
        await _settled(client, 1)
    (woke,) = _woken(log)
    always, _ = resume_claims()  # what fedhpc-continue tells the agent to read
    assert always <= set(woke), always - set(woke)
    assert woke["event"] == "task.stage_in_failed"
    assert woke["task_id"] == nxt.task_id
    assert woke["state"] == "failed"
    assert woke["transfer_id"] == pre.transfers[0]
    assert "missing.dat" in woke["reason"] or "stage-in" in woke["reason"]
    assert any("move_data" in step for step in woke["next"])


async def test_a_move_data_that_fails_wakes_its_agent_once_whoever_wins_the_race(
    devfed: Any, tmp_path: Path
) -> None:
    """move_data, then submit_task(stage_in=...) at once, as the skill says. The copy fails (no
    such source) either before the task registers (the submit is refused with a typed error and
    the transfer's own event wakes the agent) or after (the task's event does): once, either way."""
    log = tmp_path / "agent.log"
    run = "wake-" + uuid.uuid4().hex[:8]
    async with running(tmp_path / "h") as client:
        handle = await client.move_data(
            MoveDataRequest.model_validate(
                {
                    "source": f"devanvil:scratch/{run}/nothing-here.dat",
                    "destination": f"devvista:scratch/{run}/in.dat",
                }
            )
        )
        await client.register_continuation(handle.transfer_id, _agent(log, TRANSFER_EVENTS))
        refusal: FedError | None = None
        try:
            task = await client.submit_task(
                SubmitTaskRequest(
                    command=("cat", "in.dat"),
                    envelope=ENV,
                    stage_in=(handle.transfer_id,),
                    continuation=_agent(log),
                )
            )
        except FedError as exc:
            refusal = exc
        if refusal is not None:
            assert refusal.code == "stage_in_failed", refusal.as_dict()
            assert "move_data" in refusal.hint
            expected = ("transfer.failed", handle.transfer_id)
        else:
            done = await wait_terminal(client, task.task_id)
            assert done.state is JobState.FAILED
            expected = ("task.stage_in_failed", task.task_id)
        await _settled(client, 1)
        # Submitting on a transfer known to have failed is refused, always.
        with pytest.raises(FedError) as refused:
            await client.submit_task(
                SubmitTaskRequest(
                    command=("true",), envelope=ENV, stage_in=(handle.transfer_id,), name="late"
                )
            )
        assert refused.value.code == "stage_in_failed"
    (woke,) = _woken(log)
    about = woke.get("task_id") or woke.get("transfer_id") or woke.get("subject")
    assert (woke["event"], about) == expected
