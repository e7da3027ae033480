"""Per-user scheduler limits on the real local federation: a group larger than the partition's
`max_jobs_per_user` waits in fedhpc (queued, with a reason get_result shows), is released
oldest first as its jobs finish, and the scheduler never holds more of the user's jobs there
than the limit (so a center's MaxSubmit would never have refused one)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from fedhpc.domain import JobState, ResourceEnvelope
from fedhpc.ops.continuations import ContinuationSpec, Runtime
from fedhpc.ops.tasks import GroupChild, ResultRequest, SubmitGroupRequest
from fedhpc.orchestrator.holdback import HOLD_PREFIX
from fedhpc_dev.profiles import dev_profiles_dir
from tests.integration.daemon_util import drain, running, settled

pytestmark = pytest.mark.devfed

LIMIT = 3
CHILDREN = 8


@pytest.fixture
def fed(devfed: Any) -> Iterator[Any]:
    drain(devfed)
    yield devfed
    drain(devfed)


def limited_home(tmp_path: Path, limit: int) -> Path:
    """A fedhpc home whose only site is devanvil, its `shared` partition capped at `limit`
    jobs per user (a profile folder overrides the shipped profile of the same name)."""
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    text = (dev_profiles_dir() / "devanvil.toml").read_text()
    text = text.replace('name = "shared"\n', f'name = "shared"\nmax_jobs_per_user = {limit}\n')
    assert f"max_jobs_per_user = {limit}" in text
    (profiles / "devanvil.toml").write_text(text)
    home = tmp_path / "h"
    home.mkdir()
    others = "".join(
        f"[sites.{s}]\nenabled = false\n" for s in ("devdelta", "devdeltaai", "devvista")
    )
    (home / "config.toml").write_text(f'profile_dirs = ["{profiles}"]\n[sites.devanvil]\n{others}')
    return home


def _max_concurrent(rows: list[tuple[datetime, datetime]]) -> int:
    """The most jobs alive at the scheduler at once (submitted, not yet ended)."""
    points = sorted(
        [(s, 1) for s, _ in rows] + [(e, -1) for _, e in rows], key=lambda p: (p[0], p[1])
    )
    live = most = 0
    for _, step in points:
        live += step
        most = max(most, live)
    return most


async def test_a_group_over_the_user_limit_waits_in_fedhpc_and_is_released_in_order(
    fed: Any, tmp_path: Path
) -> None:
    home = limited_home(tmp_path, LIMIT)
    env = ResourceEnvelope.model_validate(
        {"wall_time": {"min": "5m"}, "cpus": {"min": 1, "max": 1}, "sites_include": ["devanvil"]}
    )
    agent = tmp_path / "agent"  # the resumed "agent": one JSON line per resume
    wake = ContinuationSpec(
        runtime=Runtime.COMMAND,
        command=("bash", "-c", 'cat >> "$1"; echo >> "$1"', "agent", str(agent)),
    )
    async with running(home) as client:
        group = await client.submit_group(
            SubmitGroupRequest(
                objective="a sweep larger than the partition's per-user job limit",
                children=tuple(
                    GroupChild(command=("sleep", "3"), name=f"p{i}") for i in range(CHILDREN)
                ),
                envelope=env,
                continuation=wake,
            )
        )
        ids = [c.task_id for c in group.children]
        assert len(ids) == CHILDREN
        # The youngest child waits in fedhpc with a reason a person and an agent can read.
        with anyio.fail_after(30):
            while True:
                last = await client.get_result(ResultRequest(task_id=ids[-1]))
                if last.waiting is not None and last.waiting.startswith(HOLD_PREFIX):
                    break
                await anyio.sleep(0.3)
        assert last.state is JobState.QUEUED
        assert "devanvil/shared" in last.waiting and f"of {LIMIT} jobs" in last.waiting
        assert last.attempts == ()  # never sent to the scheduler
        view = await client.group(group.group_id)
        held = [c for c in view.children if c.state is JobState.QUEUED]
        assert held and all(c.decision.startswith(HOLD_PREFIX) for c in held)
        with anyio.fail_after(180):
            while (view := await client.group(group.group_id)).state in {"placing", "running"}:
                await anyio.sleep(1)
        assert view.counts == {"completed": CHILDREN}
        results = [await client.get_result(ResultRequest(task_id=t)) for t in ids]
        # The agent hears about the sweep once, for its round, never once per child.
        with anyio.fail_after(60):
            while not agent.exists() or not agent.read_text().strip():
                await anyio.sleep(0.3)
        # Every event routed and every resume done: a resume per child would show here.
        delivered = await settled(client)
    assert [(d.event, d.state) for d in delivered] == [("group.round_terminal", "delivered")]
    (resume,) = [json.loads(x) for x in agent.read_text().splitlines() if x.strip()]
    assert resume["event"] == "group.round_terminal"
    assert resume["counts"] == {"completed": CHILDREN}
    assert all(len(r.attempts) == 1 for r in results)  # no rejection, no retry
    assert all(r.waiting is None for r in results)
    job_ids = [str(r.attempts[0].job_id) for r in results]
    # Released oldest first: child i's job is submitted before child i+2's (two submissions
    # may be in flight at once, so neighbours can swap). Children released together may go
    # as one job array (issue 40): an element's id is ARRAY_INDEX, in its array's order.
    order = sorted(range(CHILDREN), key=lambda i: [int(x) for x in job_ids[i].split("_")])
    assert all(abs(pos - i) <= 1 for pos, i in enumerate(order)), order
    # The scheduler's own record: never more than LIMIT of these jobs at once.
    out = fed.run(
        "devanvil",
        "sacct",
        "-X",
        "-n",
        "-P",
        "-o",
        "JobID,JobName,State,Submit,End",
        "-j",
        ",".join(job_ids),
    )
    assert out.returncode == 0, out.stderr
    rows = [line.split("|") for line in out.stdout.splitlines() if line]
    assert len(rows) == CHILDREN
    assert all(r[2] == "COMPLETED" and re.match(r"fedhpc-t", r[1]) for r in rows), rows
    spans = [(datetime.fromisoformat(r[3]), datetime.fromisoformat(r[4])) for r in rows]
    assert _max_concurrent(spans) <= LIMIT
