"""The orchestrator on the real local federation, through a real daemon: results, retries,
wall-time extension, the paper's RQ4 group scenario, a lost controller, and idempotency."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from fedhpc.domain import JobState, ResourceEnvelope
from fedhpc.ops.tasks import (
    AdaptationPolicy,
    GroupChild,
    ResultRequest,
    SubmitGroupRequest,
    SubmitTaskRequest,
)
from fedhpc.placement import PolicyKind
from tests.integration.daemon_util import drain, job_id_of, running, sbatch, wait_terminal

pytestmark = pytest.mark.devfed


@pytest.fixture
def fed(devfed: Any) -> Iterator[Any]:
    drain(devfed)
    yield devfed
    drain(devfed)


def _env(**kw: Any) -> ResourceEnvelope:
    return ResourceEnvelope.model_validate({"wall_time": {"min": "5m"}, **kw})


async def _events(client: Any) -> list[tuple[str, str]]:
    return [(e["kind"], e["subject"]) for e in await client.events(limit=1000)]


async def test_task_completes_with_one_event_and_a_bounded_preview(
    fed: Any, tmp_path: Path
) -> None:
    async with running(tmp_path / "h") as client:
        req = SubmitTaskRequest(
            command=("bash", "-c", "printf 'line %s\\n' $(seq 1 2000)"),
            envelope=_env(cpus={"min": 1, "max": 2}),
            name="lines",
        )
        handle = await client.submit_task(req)
        again = await client.submit_task(req)  # a retried call: same task, no second job
        assert again.task_id == handle.task_id
        assert handle.state is JobState.SUBMITTED  # answered on placement (issue 33)
        assert handle.site and handle.attempt == 1
        job_id = await job_id_of(client, handle.task_id)
        assert (await client.submit_task(req)).job_id == job_id  # still the one job
        assert "nothing will resume" in handle.next  # no continuation was asked for
        done = await wait_terminal(client, handle.task_id)
        assert done.state is JobState.COMPLETED
        (attempt,) = done.attempts
        assert attempt.job_name == f"fedhpc-{handle.task_id}-1"
        assert attempt.started_at is not None
        assert attempt.wait_s is not None
        assert done.provenance is not None
        assert done.provenance.feasible >= 1
        out = {o.kind: o for o in done.outputs}
        assert out["stdout"].bytes == sum(len(f"line {i}\n") for i in range(1, 2001))
        preview = await client.get_result(
            ResultRequest(task_id=handle.task_id, preview="stdout", max_bytes=100)
        )
        assert preview.preview is not None
        assert preview.preview.endswith("line 1999\nline 2000\n")  # a tail: the last bytes
        assert len(preview.preview) == 100
        assert preview.truncated
        assert preview.stderr is None  # it completed: no stderr tail
        assert preview.next.startswith("Completed")
        assert await _events(client) == [("task.terminal", handle.task_id)]
        # The task ended on slurmdbd's first final row, which lacks the eligible time; the
        # daemon fills it in once the row settles, without a second event.
        with anyio.fail_after(60):
            while (await client.get_result(ResultRequest(task_id=handle.task_id))).attempts[
                0
            ].eligible_at is None:
                await anyio.sleep(0.5)
        filled = (await client.get_result(ResultRequest(task_id=handle.task_id))).attempts[0]
        eligible = fed.run(
            attempt.site,
            "env",
            "SLURM_TIME_FORMAT=%s",
            "sacct",
            "-n",
            "-X",
            "-P",
            f"--jobs={attempt.job_id}",
            "-o",
            "Eligible",
        )
        assert filled.eligible_at is not None
        assert int(filled.eligible_at.timestamp()) == int(eligible.stdout.strip())
        assert await _events(client) == [("task.terminal", handle.task_id)]
        # Settled now: the job's name is in accounting too (the first final row lacked it).
        acct = fed.run(
            attempt.site,
            "sacct",
            "-n",
            "-X",
            "-P",
            f"--name={attempt.job_name}",
            "--starttime=now-1hours",
            "-o",
            "JobID",
        )
        assert acct.stdout.split() == [attempt.job_id]


# Slurm's wall time is in whole minutes: the first attempt runs one out (76-89 s).
@pytest.mark.budget(90)
async def test_timeout_is_resubmitted_with_a_longer_wall_time(fed: Any, tmp_path: Path) -> None:
    async with running(tmp_path / "h") as client:
        # Only the first attempt overruns: the job name carries the attempt number.
        script = 'case "$SLURM_JOB_NAME" in *-1) sleep 600;; esac; echo done'
        handle = await client.submit_task(
            SubmitTaskRequest(
                command=("bash", "-c", script),
                envelope=_env(wall_time={"min": "1m"}),
                adaptation=AdaptationPolicy(max_wall_extensions=1, wall_factor=2.0, max_retries=0),
            )
        )
        done = await wait_terminal(client, handle.task_id, limit=240)
        assert done.state is JobState.COMPLETED
        first, second = done.attempts
        assert first.state is JobState.TIMEOUT
        assert first.shape is not None and second.shape is not None
        assert (first.shape.wall_time_s, second.shape.wall_time_s) == (60, 120)
        assert await _events(client) == [("task.terminal", handle.task_id)]


async def test_beyond_its_retry_budget_a_task_raises_one_exception_event(
    fed: Any, tmp_path: Path
) -> None:
    async with running(tmp_path / "h") as client:
        handle = await client.submit_task(
            SubmitTaskRequest(
                command=("bash", "-c", "echo broken >&2; exit 3"),
                envelope=_env(),
                adaptation=AdaptationPolicy(max_retries=1),
            )
        )
        done = await wait_terminal(client, handle.task_id)
        assert done.state is JobState.FAILED
        assert [a.state for a in done.attempts] == [JobState.FAILED, JobState.FAILED]
        assert all(a.exit_code == 3 for a in done.attempts)
        await anyio.sleep(2.5)  # two more control cycles: still one event
        events = await client.events()
        assert [(e["kind"], e["subject"]) for e in events] == [
            ("task.retry_exhausted", handle.task_id)
        ]
        assert events[0]["payload"]["retries"] == 1


async def test_rq4_group_spreads_then_replaces_the_stalled_child(fed: Any, tmp_path: Path) -> None:
    # devanvil's two H100s are busy for a long time and more work is queued behind them.
    for _ in range(2):
        sbatch(
            fed,
            "devanvil",
            "-p",
            "ai",
            "-A",
            "fedhpc-gpu",
            "--gres=gpu:h100:2",
            "-t",
            "30",
            "--wrap",
            "sleep 1800",
        )
    # The child on devanvil counts as stalled once pending 5 s (not the default 15 s): it is
    # re-placed as its siblings end (they run 4 s).
    async with running(tmp_path / "h", FEDHPC_STALL_S="5") as client:
        group = await client.submit_group(
            SubmitGroupRequest(
                objective="four single-GPU evaluations on distinct systems",
                children=tuple(
                    GroupChild(command=("sleep", "4"), name=f"eval{i}") for i in range(4)
                ),
                envelope=_env(gpus={"min": 1, "max": 1}),
                spread=True,
            )
        )
        # The answer waits for placement 2 s at most (FEDHPC_PLACE_WAIT_S); on a busy machine
        # the children's sites come after it.
        placed = group.children
        with anyio.fail_after(60):
            while any(c.site is None for c in placed):
                await anyio.sleep(0.5)
                placed = (await client.group(group.group_id)).children
        sites = [c.site for c in placed]
        assert len(set(sites)) == 4, sites  # distinct systems, one of them the saturated one
        stalled = placed[sites.index("devanvil")]
        with anyio.fail_after(180):
            while (view := await client.group(group.group_id)).state == "running":
                await anyio.sleep(1)
        assert view.state == "completed"
        assert view.counts == {"completed": 4}
        moved = next(c for c in view.children if c.task_id == stalled.task_id)
        assert moved.site != "devanvil"  # re-placed after its siblings finished
        result = await client.get_result(ResultRequest(task_id=stalled.task_id))
        assert [a.superseded for a in result.attempts] == [True, False]
        # Exactly the registered events: the move (where from, where to, why; it wakes
        # nobody) and one for the round.
        events = await client.events(limit=1000)
        assert [(e["kind"], e["subject"]) for e in events] == [
            ("task.moved", stalled.task_id),
            ("group.round_terminal", group.group_id),
        ]
        went = events[0]["payload"]
        assert (went["moved_from"], went["moved_to"]) == (
            "devanvil/ai",
            f"{moved.site}/{result.attempts[1].partition}",
        )
        assert "finishes sooner" in went["reason"] and went["group_id"] == group.group_id


async def test_lost_controller_replaces_pending_work_and_accepts_one_result(
    fed: Any, tmp_path: Path
) -> None:
    # devdeltaai is full, so a task fixed there waits in its queue.
    sbatch(
        fed,
        "devdeltaai",
        "-p",
        "ghx4",
        "-A",
        "fedhpc-gpu",
        "--gres=gpu:gh200:4",
        "-t",
        "30",
        "--wrap",
        "sleep 1800",
    )
    async with running(tmp_path / "h") as client:
        handle = await client.submit_task(
            SubmitTaskRequest(
                command=("sleep", "3"),
                envelope=_env(gpus={"min": 1, "max": 1}),
                policy=PolicyKind.FIXED_SITE,
                fixed_site="devdeltaai",
                fallback=True,
                adaptation=AdaptationPolicy(replace_pending=False),
            )
        )
        assert handle.site == "devdeltaai"  # fallback only when the fixed site cannot run it
        await job_id_of(client, handle.task_id)  # in devdeltaai's queue before it dies
        import os
        import signal

        os.kill(fed.controller_pid("devdeltaai"), signal.SIGTERM)
        try:
            with anyio.fail_after(60):
                while (
                    len(
                        (
                            r := await client.get_result(ResultRequest(task_id=handle.task_id))
                        ).attempts
                    )
                    < 2
                ):
                    await anyio.sleep(0.5)
            assert r.attempts[0].superseded
            assert r.attempts[1].site != "devdeltaai"
            assert r.provenance is not None and "FALLBACK" in r.provenance.decision
        finally:
            from tests.unit.test_cli import _run  # the installed CLI, as a user runs it

            assert _run("devfed", "up").returncode == 0
        done = await wait_terminal(client, handle.task_id)
        assert done.state is JobState.COMPLETED
        with anyio.fail_after(60):  # the site is back: the superseded job gets cancelled
            while True:
                first = (await client.get_result(ResultRequest(task_id=handle.task_id))).attempts[0]
                if first.state is JobState.CANCELLED:
                    break
                await anyio.sleep(1)
        kinds = await _events(client)
        assert kinds.count(("task.terminal", handle.task_id)) == 1
