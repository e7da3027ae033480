"""Crash safety: a 50-task workload while the daemon is killed with SIGKILL ten times at random
points. Every task ends in its true state, no job is submitted twice, no event is lost or
written again under a new id."""

from __future__ import annotations

import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.client.errors import AcceptedUnknown, DaemonUnavailable
from fedhpc.domain import JobState, ResourceEnvelope
from fedhpc.ops.task_views import TaskHandle
from fedhpc.ops.tasks import AdaptationPolicy, SubmitTaskRequest
from fedhpc.settings.daemon import DaemonSettings
from tests.integration.daemon_util import drain, start, stop

pytestmark = pytest.mark.devfed

TASKS = 50
KILLS = 10


def _request(i: int) -> SubmitTaskRequest:
    fails = i % 10 == 7  # a few tasks really fail: their true terminal state is "failed"
    script = f"sleep {1 + i % 3}; exit {3 if fails else 0}"
    return SubmitTaskRequest(
        command=("bash", "-c", script),
        name=f"crash{i}",
        envelope=ResourceEnvelope.model_validate({"cpus": {"min": 1}, "wall_time": {"min": "5m"}}),
        adaptation=AdaptationPolicy(max_retries=0, replace_pending=False),
        idempotency_key=f"crash-test-{i}",
    )


def _accounted(devfed: Any, task_ids: set[str]) -> Counter[str]:
    """How often each of these tasks' job names appears in the clusters' accounting."""
    names: Counter[str] = Counter()
    for site in devfed.sites:
        out = devfed.run(site, "sacct", "-n", "-X", "-P", "--starttime=now-1hours", "-o", "JobName")
        names.update(n for n in out.stdout.split() if n.startswith("fedhpc-t"))
    return Counter(
        {n: c for n, c in names.items() if n.rsplit("-", 1)[0].removeprefix("fedhpc-") in task_ids}
    )


async def test_kill_9_ten_times_during_a_50_task_workload(devfed: Any, tmp_path: Path) -> None:
    drain(devfed)
    home = tmp_path / "h"
    settings = DaemonSettings.from_env(home=home)
    rng = random.Random(20261129)
    handles: dict[int, TaskHandle] = {}
    proc = start(home)
    kills = 0
    try:
        async with DaemonClient(settings, timeout_s=20) as client:
            await client.wait_until_up(30)
            await client.refresh()
            pending = list(range(TASKS))
            with anyio.fail_after(600):
                while pending or kills < KILLS:
                    if pending:  # submit a few; a call cut by a kill is simply sent again
                        for i in pending[: rng.randint(1, 8)]:
                            try:
                                handles[i] = await client.submit_task(_request(i))
                            except DaemonUnavailable:
                                break
                        pending = [i for i in range(TASKS) if i not in handles]
                    if kills < KILLS:
                        await anyio.sleep(rng.uniform(0.0, 1.5))
                        stop(proc, kill=True)
                        kills += 1
                        proc = start(home)
                        await client.wait_until_up(30)
            # Let the last daemon finish the work.
            with anyio.fail_after(300):
                while True:
                    tasks = await client.tasks(limit=1000)
                    if len(tasks) == TASKS and all(t.state.terminal for t in tasks):
                        break
                    await anyio.sleep(0.3)
            events = await client.events(limit=1000)
    finally:
        stop(proc)
    states = {t.name: t.state for t in tasks}
    for i in range(TASKS):
        expected = JobState.FAILED if i % 10 == 7 else JobState.COMPLETED
        assert states[f"crash{i}"] is expected, (i, states[f"crash{i}"])
    assert {h.task_id for h in handles.values()} == {t.task_id for t in tasks}
    # sacct on every cluster: each job name was submitted exactly once. slurmctld hands a job's
    # record to slurmdbd on its own schedule: read until every task's job is there (at most 60 s).
    ids = {t.task_id for t in tasks}
    for _ in range(120):  # 60 s of waiting at most
        if len(ours := _accounted(devfed, ids)) >= TASKS:
            break
        await anyio.sleep(0.5)
    assert ours, "no jobs found in accounting"
    assert max(ours.values()) == 1, {n: c for n, c in ours.items() if c > 1}
    assert len(ours) == TASKS  # no retries were allowed: one job per task
    # One event per task end, none lost, none duplicated under a new id.
    by_subject = Counter(e["subject"] for e in events)
    assert len(events) == TASKS
    assert set(by_subject.values()) == {1}
    assert len({e["id"] for e in events}) == TASKS


BURST_SESSIONS = 16
BURST_EACH = 4
BURST_KILLS = 4


def _burst_request(k: int, i: int) -> SubmitTaskRequest:
    return SubmitTaskRequest(
        command=("sleep", "1"),
        name=f"burst{k}-{i}",
        envelope=ResourceEnvelope.model_validate({"cpus": {"min": 1}, "wall_time": {"min": "5m"}}),
        adaptation=AdaptationPolicy(max_retries=0, replace_pending=False),
        idempotency_key=f"burst-test-{k}-{i}",
    )


async def test_kill_9_during_a_sixteen_session_burst_loses_and_repeats_nothing(
    devfed: Any, tmp_path: Path
) -> None:
    """Sixteen clients submit at once, so each site's jobs go several to a submit call (issue
    33), while the daemon is killed with SIGKILL mid-burst, four times. Every task ends once,
    every job name is in the clusters' accounting once, and no task is known by two ids."""
    drain(devfed)
    home = tmp_path / "h"
    settings = DaemonSettings.from_env(home=home)
    rng = random.Random(20261204)
    handles: dict[tuple[int, int], TaskHandle] = {}
    proc = start(home)

    async def session(k: int) -> None:
        async with DaemonClient(settings, timeout_s=20) as client:
            for i in range(BURST_EACH):
                while (k, i) not in handles:  # a call cut by a kill is simply sent again
                    try:
                        handles[k, i] = await client.submit_task(_burst_request(k, i))
                    except (DaemonUnavailable, AcceptedUnknown):  # the same key again
                        await anyio.sleep(0.2)

    try:
        async with DaemonClient(settings, timeout_s=20) as client:
            await client.wait_until_up(30)
            await client.refresh()
            with anyio.fail_after(600):
                async with anyio.create_task_group() as tg:
                    for k in range(BURST_SESSIONS):
                        tg.start_soon(session, k)
                    for _ in range(BURST_KILLS):
                        await anyio.sleep(rng.uniform(0.2, 1.2))
                        stop(proc, kill=True)
                        proc = start(home)
                        await client.wait_until_up(30)
            total = BURST_SESSIONS * BURST_EACH
            with anyio.fail_after(300):
                while True:
                    tasks = await client.tasks(limit=1000)
                    if len(tasks) == total and all(t.state.terminal for t in tasks):
                        break
                    await anyio.sleep(0.3)
    finally:
        stop(proc)
    assert {t.state for t in tasks} == {JobState.COMPLETED}
    assert {h.task_id for h in handles.values()} == {t.task_id for t in tasks}
    ids = {t.task_id for t in tasks}
    for _ in range(120):  # 60 s of waiting at most
        if len(ours := _accounted(devfed, ids)) >= total:
            break
        await anyio.sleep(0.5)
    assert max(ours.values()) == 1, {n: c for n, c in ours.items() if c > 1}
    assert len(ours) == total
    # The burst went several jobs to a call somewhere (each daemon logs its submit calls).
    calls = [
        int(m.group(1))
        for log in tmp_path.glob("daemon-*.log")
        for m in re.finditer(r"event='submit call' .*?jobs=(\d+)", log.read_text(errors="replace"))
    ]
    assert any(jobs > 1 for jobs in calls), calls
