"""Calibration on the real local federation: every finished task's realised wait meets the
waits predicted for it, so an estimator's n on a partition grows with each task, a burst of
tasks placed together included, and a band is reported. (Identical submissions inside the
retry window are one task: a burst of the same command counts once.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from fedhpc.domain import ResourceEnvelope
from fedhpc.ops.tasks import SubmitTaskRequest
from tests.integration.daemon_util import drain, running, wait_terminal

pytestmark = pytest.mark.devfed

ONE_CPU = {
    "cpus": {"min": 1, "max": 1},
    "wall_time": {"min": "5m", "max": "5m"},
    "sites_include": ["devdelta"],
}
BURST = 7


@pytest.fixture
def fed(devfed: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("FEDHPC_DEVFED", "1")
    drain(devfed)
    yield devfed
    drain(devfed)


async def _rows(client: Any, site: str, partition: str) -> dict[str, dict[str, Any]]:
    body = await client.estimators()
    return {
        e["method"]: e
        for e in body["estimators"]
        if (e["site"], e["partition"]) == (site, partition)
    }


async def test_every_task_of_a_burst_is_judged_and_a_band_is_reported(
    fed: Any, tmp_path: Path
) -> None:
    env = ResourceEnvelope.model_validate(ONE_CPU)
    # Distinct commands: identical submissions inside the retry window are one task (idem.py).
    req = SubmitTaskRequest(command=("true", "0"), envelope=env)
    async with running(tmp_path / "h") as client:
        # One task first: n = 1 once it finished and accounting gave its wait.
        first = await client.submit_task(req)
        done = await wait_terminal(client, first.task_id)
        (att,) = done.attempts
        where = (att.site, att.partition)
        with anyio.fail_after(120):
            while not (rows := await _rows(client, *where)):
                await anyio.sleep(0.5)
        assert {e["n"] for e in rows.values()} == {1}, rows
        # The same submission again is the same task (a retry), not a second one to judge.
        assert (await client.submit_task(req)).task_id == first.task_id
        # Then a burst placed in one pass: every task's prediction meets its realised wait.
        ids: list[str] = []

        async def submit(i: int) -> None:
            one = SubmitTaskRequest(command=("true", str(i)), envelope=env)
            ids.append((await client.submit_task(one)).task_id)

        async with anyio.create_task_group() as tg:
            for i in range(1, BURST + 1):
                tg.start_soon(submit, i)
        assert len(set(ids)) == BURST
        finished = [await wait_terminal(client, t) for t in ids]
        here = sum((a.site, a.partition) == where for r in finished for a in r.attempts)
        assert here >= 3, [(a.site, a.partition) for r in finished for a in r.attempts]
        # paper predicts for every candidate: its n counts every finished task there. The
        # others predict when they have data (a scheduler that answered in time, a history).
        rows = {}
        with anyio.fail_after(180):
            while rows.get("paper", {}).get("n") != 1 + here:
                rows = await _rows(client, *where)
                await anyio.sleep(0.5)
        print(rows)
        assert all(e["n"] <= 1 + here for e in rows.values()), rows
        banded = [e for e in rows.values() if e.get("band_s")]
        assert banded, rows
        # An edge at the floor (jobs that started at once) is None: 0 s whatever the prediction.
        edges = [x for x in banded[0]["band_s"] if x is not None]
        assert edges == sorted(edges), banded[0]
