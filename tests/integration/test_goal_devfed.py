"""The placement goal through the real daemon on the local federation: `cheapest` moves a GPU
task from devdelta's gpuA100x4 (1 SU per GPU-hour) to gpuA40x4 (0.5), and the answer's
decision line says the goal and the charge."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from fedhpc.domain import ResourceEnvelope
from fedhpc.ops.tasks import CancelRequest, SubmitTaskRequest
from tests.integration.daemon_util import drain, running

pytestmark = pytest.mark.devfed


@pytest.fixture
def fed(devfed: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("FEDHPC_DEVFED", "1")
    drain(devfed)
    yield devfed
    drain(devfed)


def _request(n: int, goal: str | None) -> SubmitTaskRequest:
    envelope = {
        "gpus": {"min": 1, "max": 1},
        "cpus": {"min": 4, "max": 4},
        "wall_time": {"min": "10m", "max": "10m"},
        "sites_include": ["devdelta"],
        # Ranks after the charge: decides between equally fast partitions under `fastest`.
        "preferences": {"partitions": ["devdelta/gpuA100x4"], "goal": goal},
    }
    return SubmitTaskRequest(
        command=("sleep", "300", str(n)), envelope=ResourceEnvelope.model_validate(envelope)
    )


async def test_the_cheapest_goal_changes_the_pick_and_the_decision_shows_the_charge(
    fed: Any, tmp_path: Path
) -> None:
    async with running(tmp_path / "h") as client:
        fast = await client.submit_task(_request(1, None))
        await client.cancel(CancelRequest(task_id=fast.task_id))
        cheap = await client.submit_task(_request(2, "cheapest"))
        await client.cancel(CancelRequest(task_id=cheap.task_id))
    print(f"fastest: {fast.decision}\ncheapest: {cheap.decision}")
    assert (fast.site, fast.partition) == ("devdelta", "gpuA100x4"), fast
    assert fast.decision.startswith("est. wait "), fast.decision  # the default goal unsaid
    assert (cheap.site, cheap.partition) == ("devdelta", "gpuA40x4"), cheap
    assert cheap.decision.startswith("best-feasible, cheapest: est. wait "), cheap.decision
    assert _charge(cheap.decision) < _charge(fast.decision)  # 0.5 vs 1 SU per GPU-hour


def _charge(decision: str) -> float:
    found = re.search(r"\+ run \d+s, ([0-9.e+-]+) ", decision)
    assert found is not None, decision
    return float(found.group(1))
