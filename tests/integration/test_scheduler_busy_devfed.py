"""A rate-limited scheduler on the real Slurm federation: wrappers in front of `sbatch` and
`squeue` refuse calls the way a busy slurmctld does. The daemon backs off: the task runs,
once, on the site it was pinned to (no lost site, no re-placement, no duplicate job)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from fedhpc.ops.tasks import SubmitTaskRequest
from tests.integration.daemon_util import running, wait_terminal

pytestmark = pytest.mark.devfed

SITE = "devanvil"
BUSY = "error: Batch job submission failed: Resource temporarily unavailable"
SLOW = "error: slurm_load_jobs error: Socket timed out on send/recv operation"

# A wrapper that refuses calls FIRST..LAST (counted in its own file) with the rate limiter's
# words and passes every other call to the real command.
WRAPPER = """#!/bin/bash
count="$(dirname "$0")/{name}.calls"
n=$(( $(cat "$count" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$count"
if [ "$n" -ge {first} ] && [ "$n" -le {last} ]; then
    echo "{name}: {words}" >&2
    exit 1
fi
exec {real} "$@"
"""


def _wrap(folder: Path, name: str, first: int, last: int, words: str) -> None:
    real = f"/usr/bin/{name}"
    path = folder / name
    path.write_text(WRAPPER.format(name=name, first=first, last=last, words=words, real=real))
    path.chmod(0o755)


def _calls(folder: Path, name: str) -> int:
    path = folder / f"{name}.calls"
    return int(path.read_text()) if path.exists() else 0


async def test_a_rate_limited_scheduler_is_backed_off_without_losing_or_doubling_a_job(
    devfed: Any, tmp_path: Path
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _wrap(bin_dir, "sbatch", 1, 2, BUSY)  # the first two submissions are refused
    _wrap(bin_dir, "squeue", 1, 4, SLOW)  # and the first four squeue calls time out
    path = f"{bin_dir}:{os.environ['PATH']}"
    home = tmp_path / "h"
    async with running(home, PATH=path) as client:
        req = SubmitTaskRequest.model_validate(
            {
                "command": ["bash", "-c", "echo ran once"],
                "envelope": {"cpus": {"min": 1}, "wall_time": {"min": "5m"}},
                "fixed_site": SITE,
            }
        )
        handle = await client.submit_task(req)
        done = await wait_terminal(client, handle.task_id, limit=240)
    assert done.state == "completed", done
    # Completion needs a submission and an observation that went through, after the refusals.
    assert _calls(bin_dir, "sbatch") >= 3 and _calls(bin_dir, "squeue") >= 5
    assert {a.site for a in done.attempts} == {SITE}
    assert len(done.attempts) == 1 and done.attempts[0].job_id is not None
    names = {a.job_name for a in done.attempts}
    with anyio.fail_after(60):  # slurmdbd records a job a moment after slurmctld ends it
        while True:
            argv = ("sacct", "-X", "-n", "-P", "-S", "now-1hour", "-o", "JobID,JobName")
            jobs = devfed.run(SITE, *argv, timeout=30).stdout.splitlines()
            ours = [line for line in jobs if line.split("|", 1)[-1] in names]
            if ours:
                break
            await anyio.sleep(0.5)
    assert len(ours) == 1, ours  # one job in the scheduler, whatever was refused
