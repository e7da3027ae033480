"""A task pinned to a site that is offline waits for it instead of being unschedulable: its
answers say so and why, its agent is woken once (after FEDHPC_SITE_LOST_S, not per cycle), and
it runs there once the site answers again. A real daemon on four private local-process sites
(dialect `process`); the site is lost by replacing its scheduler's state folder with a file,
so every probe of it fails, then restored."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import anyio

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.domain import Health, JobState, ResourceEnvelope
from fedhpc.ops.continuations import ContinuationSpec, Runtime
from fedhpc.ops.inspect import InspectRequest
from fedhpc.ops.tasks import ResultRequest, SubmitTaskRequest
from tests.integration.daemon_util import running, settled, wait_terminal

ENV = ResourceEnvelope.model_validate({"cpus": {"min": 1}, "wall_time": {"min": "1m"}})


def _agent(log: Path) -> ContinuationSpec:
    return ContinuationSpec(
        runtime=Runtime.COMMAND,
        command=("bash", "-c", 'cat >> "$1"; echo >> "$1"', "agent", str(log)),
    )


async def _health(client: DaemonClient, site: str) -> Health:
    view = await client.refresh(InspectRequest(sites=(site,)))
    return view.sites[0].health


async def test_a_task_pinned_to_an_offline_site_waits_tells_its_agent_once_then_runs_there(
    tmp_path: Path,
) -> None:
    fed = tmp_path / "devfed"
    env = {"FEDHPC_DEVFED": "process", "FEDHPC_DEVFED_DIR": str(fed), "FEDHPC_SITE_LOST_S": "3"}
    log = tmp_path / "agent.log"
    async with running(tmp_path / "h", **env) as client:
        root = fed / "devvista" / "localsched"
        away = root.with_name("localsched.away")
        root.rename(away)
        root.write_text("lost")  # every scheduler call on the site now fails
        try:
            with anyio.fail_after(60):
                while await _health(client, "devvista") is not Health.OFFLINE:
                    await anyio.sleep(0.3)
            handle = await client.submit_task(
                SubmitTaskRequest(
                    command=("echo", "pinned"),
                    fixed_site="devvista",
                    envelope=ENV,
                    continuation=_agent(log),
                )
            )
            assert handle.state is JobState.QUEUED, handle  # not unschedulable
            assert handle.decision.startswith("queued: waiting for devvista: offline since")
            assert handle.next.startswith("Queued, waiting for devvista (offline)"), handle.next
            assert "another fixed_site" in handle.next
            # Woken once after the grace, however many cycles the outage lasts.
            with anyio.fail_after(60):
                while not log.exists() or not log.read_text().strip():
                    await anyio.sleep(0.3)
            assert len(await settled(client, cycles=4)) == 1
            waiting = await client.get_result(ResultRequest(task_id=handle.task_id))
            assert waiting.state is JobState.QUEUED and waiting.attempts == ()
            assert waiting.waiting is not None and "devvista: offline since" in waiting.waiting
            assert waiting.next == handle.next
        finally:
            root.unlink()
            away.rename(root)
        with anyio.fail_after(60):
            while await _health(client, "devvista") is not Health.OK:
                await anyio.sleep(0.3)
        done = await wait_terminal(client, handle.task_id)
        assert done.state is JobState.COMPLETED and done.attempts[-1].site == "devvista"
        await settled(client)
    woken = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    assert [w["event"] for w in woken] == ["task.waiting_for_site", "task.terminal"]
    first = woken[0]
    assert (first["task_id"], first["site"], first["state"]) == (
        handle.task_id,
        "devvista",
        "queued",
    )
    assert "offline since" in first["reason"] and "another fixed_site" in first["hint"]
    shutil.rmtree(fed, ignore_errors=True)
