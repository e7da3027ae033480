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

# A wrapper that counts the calls whose arguments match a pattern (in its own file), refuses
# those numbered FIRST..LAST with the rate limiter's words, and passes every other call to the
# real command. The pattern picks the calls meant (a real submission, not `sbatch --test-only`
# asking where a job would start; a job's status, not a probe's queue count).
WRAPPER = """#!/bin/bash
if [[ " $* " == {pattern} ]]; then
    count="$(dirname "$0")/{name}.calls"
    n=$(( $(cat "$count" 2>/dev/null || echo 0) + 1 ))
    echo "$n" > "$count"
    if [ "$n" -ge {first} ] && [ "$n" -le {last} ]; then
        echo "{name}: {words}" >&2
        exit 1
    fi
fi
exec {real} "$@"
"""


def _wrap(folder: Path, name: str, pattern: str, first: int, last: int, words: str) -> None:
    real = f"/usr/bin/{name}"
    path = folder / name
    text = WRAPPER.format(
        name=name, pattern=pattern, first=first, last=last, words=words, real=real
    )
    path.write_text(text)
    path.chmod(0o755)


def _calls(folder: Path, name: str) -> int:
    path = folder / f"{name}.calls"
    return int(path.read_text()) if path.exists() else 0


async def test_a_rate_limited_scheduler_is_backed_off_without_losing_or_doubling_a_job(
    devfed: Any, tmp_path: Path
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _wrap(bin_dir, "sbatch", "*--parsable*", 1, 2, BUSY)  # two submissions refused
    _wrap(bin_dir, "squeue", "*--jobs=*", 1, 4, SLOW)  # the job's status times out four times
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
    # Completion needed a submission that went through after two refusals. The job's status
    # was refused at least once; its end may then be read from squeue or from accounting.
    assert _calls(bin_dir, "sbatch") >= 3 and _calls(bin_dir, "squeue") >= 1
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
