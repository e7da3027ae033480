"""Sixteen agent sessions at once (issue 33): each its own `fedhpc serve` over stdio with the
real MCP client, one daemon on four private local-process sites. One site's scheduler is held
(its lock taken by this test, as a scheduler stuck in a slow call): every submit is still
answered on its own placement, never after a submission, its own or another session's. Then the
site goes on and every task runs exactly once.

No wall-clock bound is asserted: the answers are compared with what had happened when they were
given (while the site was held, no job of its could have an id) and counted (none `queued`)."""

from __future__ import annotations

import fcntl
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from fedhpc.domain.job import JobState
from tests.integration.daemon_util import running, wait_terminal
from tests.integration.mcp_support import stdio_params

SESSIONS = 16
PER_SESSION = 2
HELD = "devvista"
OTHERS = ("devanvil", "devdelta")  # devdeltaai runs GPU work only


async def _session(
    home: Path, env: dict[str, str], k: int, ready: anyio.Event, go: anyio.Event, out: list[Any]
) -> None:
    """One agent: connects, waits for `go`, submits its tasks one after another; half the
    sessions pin theirs to the held site."""
    site = HELD if k % 2 == 0 else OTHERS[k // 2 % 2]
    async with Client(stdio_params(home, "--no-autostart", **env), mode="legacy") as mcp:
        await mcp.list_tools()
        ready.set()
        await go.wait()
        for i in range(PER_SESSION):
            args = {
                "command": ["echo", f"s{k}-{i}"],
                "name": f"s{k}-{i}",
                "envelope": {"cpus": {"min": 1}, "wall_time": {"min": "5m"}},
                "fixed_site": site,
                "idempotency_key": f"many-s{k}-{i}",
            }
            result = await mcp.call_tool("submit_task", args)
            text = result.content[0].text if result.content else ""  # type: ignore[union-attr]
            out.append((site, json.loads(text)))


async def test_sixteen_sessions_are_answered_on_placement_while_a_site_is_held(
    tmp_path: Path,
) -> None:
    home = tmp_path / "h"
    fed = tmp_path / "fed"
    env = {"FEDHPC_DEVFED": "process", "FEDHPC_DEVFED_DIR": str(fed)}
    # A held site is slow, not dead: its probes wait for the lock too, and must not time out.
    # Sixteen sessions' submits on a loaded machine may take the placer past the default 2 s
    # an answer waits for its placement: given 60 s, each answer still names its placement
    # (what this test compares), never `queued`.
    slow = {
        "FEDHPC_PROBE_TIMEOUT_S": "120",
        "FEDHPC_COMMAND_TIMEOUT_S": "120",
        "FEDHPC_PLACE_WAIT_S": "60",
    }
    async with running(home, **env, **slow) as client:
        out: list[Any] = []
        go = anyio.Event()
        readies = [anyio.Event() for _ in range(SESSIONS)]
        lock_path = fed / HELD / "localsched" / "lock"
        async with anyio.create_task_group() as tg:
            for k in range(SESSIONS):
                tg.start_soon(_session, home, env, k, readies[k], go, out)
            with anyio.fail_after(180):
                for r in readies:
                    await r.wait()
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)  # the held site's scheduler waits from here
                go.set()
                with anyio.fail_after(120):
                    while len(out) < SESSIONS * PER_SESSION:
                        await anyio.sleep(0.05)
                held_answers = [a for site, a in out if site == HELD]
                # Nothing of the held site was submitted yet: its answers came on placement.
                jobs = await client.tasks(limit=100)
                assert all(a.get("job_id") is None for a in held_answers), held_answers
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
        # Placed when answered, none `queued`; the held site's not submitted yet. (Elsewhere a
        # task may already run, or even have ended, by the time its answer is read.)
        assert [a for a in held_answers if a["state"] != "submitted"] == []
        assert [a for _, a in out if a["state"] in {"queued", "failed", "unschedulable"}] == []
        assert all(a["site"] == site for site, a in out)
        assert len({a["task_id"] for _, a in out}) == SESSIONS * PER_SESSION
        assert len(jobs) == SESSIONS * PER_SESSION
        done = [await wait_terminal(client, a["task_id"], limit=180) for _, a in out]
        assert [r.state for r in done] == [JobState.COMPLETED] * len(done)
    # Exactly once: each task's job name is in its site's scheduler records once, attempt 1.
    names: Counter[str] = Counter()
    for site in (HELD, *OTHERS):
        for rec in (fed / site / "localsched" / "jobs").glob("*.json"):
            if rec.stem.isdigit():  # the job's record (not its environment, <id>.env.json)
                names[json.loads(rec.read_text())["name"]] += 1
    ours = {f"fedhpc-{a['task_id']}-1" for _, a in out}
    assert {n: c for n, c in names.items() if n in ours} == dict.fromkeys(ours, 1)
