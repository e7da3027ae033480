"""Scheduler etiquette on the real local federation (issue 40): a Slurm that refuses calls the
way its rate limiter does (a wrapper in front of the real commands: 30 calls, then 2 a second,
past that "Socket timed out"; some refused `sbatch` calls did submit their job) is backed off
without losing or duplicating a job; and with a status floor longer than a job's run a finished
job has left `squeue` before fedhpc looks again, and its end is read from `sacct`."""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from fedhpc.domain import JobState, ResourceEnvelope
from fedhpc.ops.tasks import GroupChild, ResultRequest, SubmitGroupRequest, SubmitTaskRequest
from tests.integration.daemon_util import drain, job_id_of, running, wait_terminal

pytestmark = pytest.mark.devfed

SLURM_COMMANDS = ("sbatch", "squeue", "sacct", "scancel", "scontrol", "sinfo", "sprio", "sshare")
BUCKET, REFILL = 15, 2  # a burst of 15 calls, then 2 a second (Slurm: 30, then 2)
CHILDREN = 20
ENV = ResourceEnvelope.model_validate(
    {"wall_time": {"min": "5m"}, "cpus": {"min": 1, "max": 1}, "sites_include": ["devanvil"]}
)

# Slurm behind its rate limiter, as one user sees it, once armed: a bucket of BUCKET calls
# (every command, every process, under a lock), refilled REFILL a second; past it a call is
# refused with the words Slurm uses. A refused sbatch with an even count submits the job
# first: the controller took it and the answer was lost, as a real timeout can do.
WRAPPER = f"""#!/bin/bash
name=$(basename "$0")
dir=$(cd "$(dirname "$0")" && pwd)
[[ -e $dir/armed ]] || exec /usr/bin/$name "$@"  # until the test arms it
exec 9>>"$dir/.lock"
flock 9
now=$(date +%s.%N)
read -r tokens last < "$dir/bucket" 2>/dev/null || {{ tokens={BUCKET}; last=$now; }}
tokens=$(awk -v t="$tokens" -v l="$last" -v n="$now" \
  'BEGIN {{ t += (n - l) * {REFILL}; if (t > {BUCKET}) t = {BUCKET}; printf "%.4f", t }}')
if awk -v t="$tokens" 'BEGIN {{ exit !(t >= 1) }}'; then
  go=1; tokens=$(awk -v t="$tokens" 'BEGIN {{ printf "%.4f", t - 1 }}')
else
  go=0
fi
echo "$tokens $now" > "$dir/bucket"
n=$(( $(cat "$dir/count" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$dir/count"
flock -u 9
if (( ! go )); then
  if [[ $name == sbatch ]] && (( n % 2 == 0 )); then
    out=$(/usr/bin/sbatch "$@" 2>&1)
    echo "$n $name lost-answer $out" >> "$dir/log"
  else
    echo "$n $name refused" >> "$dir/log"
  fi
  echo "$name: error: Socket timed out on send/recv operation" >&2
  exit 1
fi
exec /usr/bin/$name "$@"
"""


@pytest.fixture
def fed(devfed: Any) -> Iterator[Any]:
    drain(devfed)
    yield devfed
    drain(devfed)


def _home(tmp_path: Path, devanvil: str = "") -> Path:
    """A fedhpc home whose only site is devanvil (`devanvil`: lines of its config entry)."""
    home = tmp_path / "h"
    home.mkdir()
    others = "".join(
        f"[sites.{s}]\nenabled = false\n" for s in ("devdelta", "devdeltaai", "devvista")
    )
    (home / "config.toml").write_text(f"[sites.devanvil]\n{devanvil}{others}")
    return home


def _wrapped(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "busy-slurm"
    bin_dir.mkdir()
    for name in SLURM_COMMANDS:
        (bin_dir / name).write_text(WRAPPER)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def _jobs_named(fed: Any, names: list[str]) -> Counter[str]:
    """How many jobs devanvil's accounting holds under each of `names` (any state)."""
    out = fed.run("devanvil", "sacct", "-X", "-n", "-P", "-a", "-o", "JobName", "-S", "now-1hour")
    assert out.returncode == 0, out.stderr
    wanted = set(names)
    return Counter(n for n in out.stdout.split() if n in wanted)


async def test_a_rate_limited_slurm_is_backed_off_and_no_job_is_lost_or_twice(
    fed: Any, tmp_path: Path
) -> None:
    bin_dir = _wrapped(tmp_path)
    home = _home(tmp_path)
    path = f"{bin_dir}:{os.environ.get('PATH', '')}"
    # Probes every 10 s (8 commands each), a control cycle every second; one sbatch per
    # child (no job array), so the submissions alone overflow the bucket.
    async with running(home, PATH=path, FEDHPC_REFRESH_S="10", FEDHPC_ARRAY_MAX="1") as client:
        (bin_dir / "armed").touch()  # the daemon up and the site probed: now the limit
        group = await client.submit_group(
            SubmitGroupRequest(
                objective="a sweep against a scheduler that sheds load",
                children=tuple(
                    GroupChild(command=("bash", "-c", f"echo child {i}"), name=f"c{i}")
                    for i in range(CHILDREN)
                ),
                envelope=ENV,
            )
        )
        ids = [c.task_id for c in group.children]
        with anyio.fail_after(300):
            while (view := await client.group(group.group_id)).state in {"placing", "running"}:
                await anyio.sleep(1)
        results = [await client.get_result(ResultRequest(task_id=t)) for t in ids]
        busy = (await client.health())["remote_calls"]["devanvil"]
    log = (bin_dir / "log").read_text().splitlines() if (bin_dir / "log").exists() else []
    kinds = Counter(line.split()[1] + " " + line.split()[2] for line in log)
    # The wrapper did refuse: submissions (with and without the job taken), and observations.
    assert kinds["sbatch refused"] and kinds["sbatch lost-answer"], (kinds, busy)
    assert kinds["squeue refused"] or kinds["sacct refused"], kinds
    assert view.counts == {"completed": CHILDREN}, (view.counts, kinds)
    # Nothing lost: every child ran its own job once. Nothing twice: the scheduler's own
    # record holds one job for each attempt fedhpc made, and each child made one.
    names = [a.job_name for r in results for a in r.attempts]
    assert len(names) == CHILDREN == len(set(names)), [r.attempts for r in results]
    # slurmdbd records a job some time after slurmctld ran it (seconds on a loaded machine):
    # asked until every name is there; a name held twice fails at once.
    with anyio.fail_after(60):
        while (held := _jobs_named(fed, names)) != Counter(names):
            assert max(held.values(), default=1) == 1, (held, kinds)
            await anyio.sleep(1)
    for r in results:
        assert r.state is JobState.COMPLETED and r.attempts[-1].exit_code == 0, r


async def test_a_job_that_left_the_queue_between_two_looks_ends_from_accounting(
    fed: Any, tmp_path: Path
) -> None:
    floor = 30  # two looks at least 30 s apart
    home = _home(tmp_path, f"status_floor_s = {floor}\n")
    async with running(home) as client:
        begun = time.monotonic()
        # It runs 10 s: fedhpc's first look (the cycle after its submission) sees it queued
        # or running however loaded the machine, so that look never reads its end. It leaves
        # squeue as it completes, about 12 s after submission (squeue without --states lists
        # no finished job: MinJobAge keeps it only for `--states=all` and scontrol), long
        # before the floor allows the second look.
        handle = await client.submit_task(
            SubmitTaskRequest(command=("bash", "-c", "sleep 10; echo done"), envelope=ENV)
        )
        job = await job_id_of(client, handle.task_id)
        with anyio.fail_after(150):  # Slurm ran it, ended it and forgot it
            while fed.run("devanvil", "squeue", "-h", f"--jobs={job}").stdout.strip():
                await anyio.sleep(0.5)
        # squeue lists it no more; fedhpc has not looked since it ran (the floor).
        seen = await client.get_result(ResultRequest(task_id=handle.task_id))
        assert not seen.state.terminal, seen
        result = await wait_terminal(client, handle.task_id, limit=180)
        status = (await client.health())["remote_calls"]["devanvil"]["total"].get("status", 0)
        looked_s = time.monotonic() - begun
    assert result.state is JobState.COMPLETED, result
    (attempt,) = result.attempts
    assert attempt.job_id == job and attempt.exit_code == 0, attempt
    assert attempt.ended_at is not None and attempt.started_at is not None, attempt
    # At most one look per floor (and the first one), whatever the 1 s control cycle.
    assert status <= 2 + looked_s // floor, (status, looked_s)
