"""One session's bad task never stops anyone else's, in a real daemon on four private
local-process sites: rows an older version accepted (a memory unit slip) or that no longer read
as a task are in the store when the daemon starts; each ends alone with its reason, the slip's
agent is woken, 20 tasks from two other sessions all complete, and the daemon's log holds the
unreadable row's traceback once, with its task id."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.domain.job import JobState
from fedhpc.errors import FedError
from fedhpc.ops.continuations import ContinuationSpec, Runtime
from fedhpc.ops.tasks import ResultRequest, SubmitTaskRequest
from fedhpc.orchestrator.records import TaskRecord
from fedhpc.settings.daemon import DaemonSettings
from fedhpc.store import Store
from fedhpc.store.continuations import put_continuation
from tests.integration.daemon_util import running, wait_terminal


async def _seed(home: Path, agent_log: Path) -> None:
    """The rows the daemon finds at start: a slip with a continuation, an unreadable body."""
    now = datetime.now(UTC)
    store = await Store.open(DaemonSettings.from_env(home=home).db_path)
    slip = TaskRecord(
        id="tslip0000001",
        request=SubmitTaskRequest.model_validate(
            {"command": ["echo", "a"], "envelope": {"cpus": {"min": 1}, "memory": {"min": 1}}}
        ),
        idempotency_key="k-slip",
        created_at=now,
        state=JobState.QUEUED,
        decision="queued: placing",
    )
    agent = ContinuationSpec(
        runtime=Runtime.COMMAND,
        command=("bash", "-c", 'cat >> "$1"; echo >> "$1"', "agent", str(agent_log)),
    )
    try:
        async with store.transaction() as tx:
            body = slip.model_dump(mode="json")
            await tx.put_task(slip.id, state="queued", body=body, at=now, idempotency_key="k-slip")
            await put_continuation(tx, slip.id, agent, at=now)
            broken = {"id": "tbroken00001", "request": {"command": 7}}
            await tx.put_task("tbroken00001", state="queued", body=broken, at=now)
    finally:
        await store.close()


async def test_bad_rows_end_alone_and_twenty_tasks_from_two_sessions_complete(
    tmp_path: Path,
) -> None:
    home = tmp_path / "h"
    home.mkdir()
    agent_log = tmp_path / "agent.log"
    await _seed(home, agent_log)
    env = {"FEDHPC_DEVFED": "process", "FEDHPC_DEVFED_DIR": str(tmp_path / "fed")}
    async with running(home, **env) as client:
        settings = DaemonSettings.from_env(home=home)
        async with DaemonClient(settings) as other:
            ids: list[str] = []
            for i in range(10):
                for caller, c in (("serve:a", client), ("serve:b", other)):
                    req = SubmitTaskRequest.model_validate(
                        {
                            "command": ["echo", caller, str(i)],
                            "envelope": {"cpus": {"min": 1}, "wall_time": {"min": "5m"}},
                            "caller": caller,
                        }
                    )
                    ids.append((await c.submit_task(req)).task_id)
        done = [await wait_terminal(client, t) for t in ids]
        assert [r.state for r in done] == [JobState.COMPLETED] * 20
        slip = await client.get_result(ResultRequest(task_id="tslip0000001"))
        assert slip.state is JobState.UNSCHEDULABLE
        assert "memory.min: 1 MiB looks like a unit slip" in slip.reasons[0]
        broken = await client.tasks(state="failed")
        assert "tbroken00001" in {t.task_id for t in broken}
        with pytest.raises(FedError) as caught:  # typed, never `internal` or `validation`
            await client.get_result(ResultRequest(task_id="tbroken00001"))
        assert caught.value.code == "task_unreadable"
        assert "it is failed" in caught.value.message
        with anyio.fail_after(60):  # the slip's agent hears it
            while not agent_log.exists() or not agent_log.read_text().strip():
                await anyio.sleep(0.3)
    woken = [json.loads(line) for line in agent_log.read_text().splitlines() if line.strip()]
    assert [(w["event"], w["task_id"]) for w in woken] == [("task.unschedulable", "tslip0000001")]
    log = "".join(p.read_text() for p in tmp_path.glob("daemon-*.log"))
    lines = [line for line in log.splitlines() if "unreadable queued task" in line]
    assert len(lines) == 1, lines
    assert "task='tbroken00001'" in lines[0]
    assert "Traceback (most recent call last)" in lines[0]
    assert "placement pass failed" not in log
