"""A lost site: work that fedhpc cannot move wakes the agent once per attempt. A real daemon on
four private local-process sites (dialect `process`: no Slurm, nothing shared with the Slurm
federation); one site is lost by replacing its scheduler's state folder with a file, so every
probe of it fails, then restored."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import anyio

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.domain import JobState, ResourceEnvelope
from fedhpc.ops.continuations import ContinuationSpec, Runtime
from fedhpc.ops.task_views import ResultManifest
from fedhpc.ops.tasks import (
    CancelRequest,
    GroupChild,
    ResultRequest,
    SubmitGroupRequest,
    SubmitTaskRequest,
)
from tests.integration.daemon_util import running, settled
from tests.skill_claims import resume_claims

# GH200 with 2+ per node: only devdeltaai has it (devvista has one per node).
GH200 = {"accelerator_types": ["gh200"], "wall_time": {"min": "10m"}}


def _agent(log: Path) -> ContinuationSpec:
    return ContinuationSpec(
        runtime=Runtime.COMMAND,
        command=("bash", "-c", 'cat >> "$1"; echo >> "$1"', "agent", str(log)),
    )


async def _attempt_in(client: DaemonClient, task_id: str, state: JobState) -> ResultManifest:
    with anyio.fail_after(60):
        while True:
            r = await client.get_result(ResultRequest(task_id=task_id))
            if r.attempts and r.attempts[-1].state is state:
                return r
            await anyio.sleep(0.3)


async def _all_ended(client: DaemonClient, *task_ids: str) -> bool:
    for t in task_ids:
        for a in (await client.get_result(ResultRequest(task_id=t))).attempts:
            if not a.state.terminal:
                return False
    return True


async def _delivered(client: DaemonClient, n: int) -> None:
    with anyio.fail_after(60):
        while len([d for d in await client.deliveries() if d.state == "delivered"]) < n:
            await anyio.sleep(0.3)


async def test_work_stuck_on_a_lost_site_wakes_its_agent_once_per_attempt(tmp_path: Path) -> None:
    fed = tmp_path / "devfed"
    env = {"FEDHPC_DEVFED": "process", "FEDHPC_DEVFED_DIR": str(fed), "FEDHPC_SITE_LOST_S": "3"}
    log = tmp_path / "agent.log"
    root = fed / "devdeltaai" / "localsched"
    async with running(tmp_path / "h", **env) as client:
        running_task = await client.submit_task(
            SubmitTaskRequest(
                command=("sleep", "90"),
                continuation=_agent(log),  # outlives the test, not long
                envelope=ResourceEnvelope.model_validate({**GH200, "gpus": {"min": 4}}),
            )
        )
        await _attempt_in(client, running_task.task_id, JobState.RUNNING)
        queued = await client.submit_task(
            SubmitTaskRequest(
                command=("true",),
                continuation=_agent(log),
                envelope=ResourceEnvelope.model_validate({**GH200, "gpus": {"min": 2}}),
            )
        )
        await _attempt_in(client, queued.task_id, JobState.PENDING)
        assert queued.site == running_task.site == "devdeltaai"
        away = root.with_name("localsched.away")
        root.rename(away)
        root.write_text("lost")  # every scheduler call on the site now fails
        try:
            await _delivered(client, 2)
            # More cycles (4 s, past FEDHPC_SITE_LOST_S), still offline: nothing new.
            assert len(await settled(client, cycles=4)) == 2
            still = await client.get_result(ResultRequest(task_id=queued.task_id))
            assert len(still.attempts) == 1  # nowhere else to go: it stays, and the agent knows
        finally:
            root.unlink()
            away.rename(root)
        for t in (running_task.task_id, queued.task_id):
            await client.cancel(CancelRequest(task_id=t))
        with anyio.fail_after(60):  # the site is back: the cancels owed to it are sent
            while not await _all_ended(client, running_task.task_id, queued.task_id):
                await anyio.sleep(0.5)
        events = [(e["kind"], e["subject"]) for e in await client.events(limit=100)]
    woken = {
        w["task_id"]: w for w in map(json.loads, filter(str.strip, log.read_text().splitlines()))
    }
    assert set(woken) == {running_task.task_id, queued.task_id}
    always, _ = resume_claims()  # what fedhpc-continue tells the agent to read
    for w in woken.values():
        assert always <= set(w), always - set(w)
        assert w["event"] == "task.site_lost"
        assert w["site"] == "devdeltaai"
        assert any(step.startswith("replan") for step in w["next"])
    assert "may still be" in woken[running_task.task_id]["reason"]
    assert "no other site fits" in woken[queued.task_id]["reason"]
    assert events.count(("task.site_lost", queued.task_id)) == 1
    assert ("site.offline", "devdeltaai") in events
    shutil.rmtree(fed, ignore_errors=True)


async def test_a_groups_children_on_a_lost_site_wake_its_agent_once_as_a_group_event(
    tmp_path: Path,
) -> None:
    # A group's continuation hears no per-child task events: their lost site must still reach
    # it, once per outage, as one group.site_lost naming the children.
    fed = tmp_path / "devfed"
    env = {"FEDHPC_DEVFED": "process", "FEDHPC_DEVFED_DIR": str(fed), "FEDHPC_SITE_LOST_S": "3"}
    log = tmp_path / "agent.log"
    root = fed / "devdeltaai" / "localsched"
    async with running(tmp_path / "h", **env) as client:
        group = await client.submit_group(
            SubmitGroupRequest(
                objective="two GH200 runs",
                continuation=_agent(log),
                children=tuple(GroupChild(command=("sleep", "90"), name=f"g{i}") for i in range(2)),
                envelope=ResourceEnvelope.model_validate({**GH200, "gpus": {"min": 2, "max": 2}}),
            )
        )
        ids = [c.task_id for c in group.children]
        for t in ids:
            await _attempt_in(client, t, JobState.RUNNING)
        away = root.with_name("localsched.away")
        root.rename(away)
        root.write_text("lost")
        try:
            await _delivered(client, 1)
            # More cycles (4 s, past FEDHPC_SITE_LOST_S), still offline: nothing new.
            assert len(await settled(client, cycles=4)) == 1
        finally:
            root.unlink()
            away.rename(root)
        for t in ids:
            await client.cancel(CancelRequest(task_id=t))
        with anyio.fail_after(60):
            while not await _all_ended(client, *ids):
                await anyio.sleep(0.5)
    woken = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    kinds = [w["event"] for w in woken]  # then the cancels end the round: its own event
    assert kinds[0] == "group.site_lost" and kinds.count("group.site_lost") == 1, kinds
    assert set(kinds) <= {"group.site_lost", "group.round_terminal"}, kinds
    w = woken[0]
    assert w["group_id"] == group.group_id and w["site"] == "devdeltaai"
    assert w["children"] == 2 and sorted(w["task_ids"]) == sorted(ids)
    assert len(json.dumps(w, separators=(",", ":"))) <= 600  # a resume's payload stays small
    assert any(step.startswith("replan") for step in w["next"])
    shutil.rmtree(fed, ignore_errors=True)
