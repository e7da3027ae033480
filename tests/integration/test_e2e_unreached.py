"""The real Claude Code CLI resumed while the daemon is down: the resumed turn runs, but its
`get_result` cannot reach fedhpc (the warm MCP server waits FEDHPC_RESUME_DAEMON_WAIT_S for a
restarting daemon, then answers daemon_unavailable), the model ends the turn and the CLI
exits 0. That delivery used to count as delivered with tools: the event was consumed and
nothing woke the agent again. Now it is delivered again once (pointing at the event already in
the session, never re-sending it); a second turn that cannot reach fedhpc makes it a dead
letter saying why and how to redrive it. Process sites only (no Slurm)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import anyio
import pytest

from fedhpc.client.daemon_client import DaemonClient
from tests.integration.fake_models import PAYLOAD_MARK, result_json
from tests.integration.test_e2e_claude import Rig, claude, rig

__all__ = ["claude"]  # the fixture, shared with test_e2e_claude

BRIDGE = {"FEDHPC_RESUME_DAEMON_WAIT_S": "1", "FEDHPC_BRIDGE_POLL_S": "0.3"}


async def _until_state(client: DaemonClient, state: str, limit: float = 120) -> None:
    with anyio.fail_after(limit):
        while not [d for d in await client.deliveries() if d.state == state]:
            await anyio.sleep(0.2)


async def _kill_during_resume(
    r: Rig, client: DaemonClient, release: threading.Event, n: int, *, hold_next: bool
) -> threading.Event | None:
    """While the `n`th resume waits for the model: SIGKILL the daemon, let the model answer
    (the turn's get_result finds no daemon), wait for the CLI to end, start a daemon again.
    With `hold_next`, the next resume waits for the model too (the event returned)."""
    with anyio.fail_after(90):
        while len(r.fake.resumes()) < n:
            await anyio.sleep(0.1)
    later = r.fake.hold_resume() if hold_next else None
    pid = int((r.fedhome / "daemon.lock").read_text().split()[0])
    os.kill(pid, 9)
    release.set()
    with anyio.fail_after(90):  # the resumed CLI ends on its own (exit 0)
        while len(list((r.fedhome / "deliveries").glob("*/rc"))) < n:
            await anyio.sleep(0.2)
    with (r.fedhome.parent / f"daemon{n + 1}.log").open("wb") as log:
        again = subprocess.Popen(
            [sys.executable, "-m", "fedhpc.daemon"],
            env={**r.daemon_env(), **BRIDGE},
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    r.extra.append(again)
    await client.wait_until_up(30)
    return later


@pytest.mark.parametrize("turns_unreached", [1, 2], ids=["once", "twice"])
async def test_a_resumed_turn_that_could_not_reach_the_daemon_is_delivered_again_once(
    claude: Path, tmp_path: Path, turns_unreached: int
) -> None:
    session = str(uuid.uuid4())
    async with rig(claude, tmp_path, bridge=BRIDGE) as (r, client):
        fake = r.fake
        hold: threading.Event | None = fake.hold_resume()
        await anyio.to_thread.run_sync(r.first_turn, session)
        task_id = r.submitted(session)["task_id"]
        for n in range(1, turns_unreached + 1):
            assert hold is not None
            hold = await _kill_during_resume(r, client, hold, n, hold_next=n < turns_unreached)
        await _until_state(client, "dead" if turns_unreached == 2 else "delivered")
        await anyio.sleep(2)  # more bridge cycles: nothing else is sent
        (d,) = await client.deliveries()
        log = r.fedhome / "deliveries"
        first_out = sorted(log.glob("*/out"), key=lambda f: f.stat().st_mtime)[0].read_text()
    assert fake.errors == []
    results = [e for e in fake.exchanges if e.phase == "after_result"]
    # the first resumed turn's get_result found no daemon (what it got instead, if not)
    got = results[0].tool_results[0]
    assert json.loads(got)["code"] == "daemon_unavailable", got
    assert '"daemon_unavailable"' in first_out.replace('\\"', '"')  # the turn did run without it
    first, again = fake.resumes()
    assert first.payload is not None and first.payload["task_id"] == task_id
    # the re-delivery points at the event already in the session: the model sees it once
    assert PAYLOAD_MARK not in again.prompt
    assert "could not reach the fedhpc daemon" in again.prompt
    assert again.payload is not None and again.payload["delivery"] == d.id
    assert fake.seen_deliveries(session) == [d.id]
    assert len(results) == 2  # two resumed turns, never a third
    if turns_unreached == 1:
        answer = result_json(results[1].tool_results[0])
        assert (answer["task_id"], answer["state"]) == (task_id, "completed")
        assert (d.state, d.tools_verified) == ("delivered", True)
    else:
        assert d.state == "dead"
        assert "could not reach the daemon" in (d.last_error or "")
        assert "one re-delivery" in (d.last_error or "")
        assert f"fedhpc deliveries retry {d.id}" in (d.last_error or "")
