"""A dead controller is found by its ping and its queued work moves (issue 40, item 4): a task
fixed to devdeltaai with `fallback`, waiting in its queue there, gets a new attempt on another
cluster once devdeltaai's controller dies; `site.offline` says the ping found it and, like
`site.online` after the controller is back, carries the time it was seen, never an earlier one.

The controller dies for the test's daemon alone, as in `test_dead_site.py`: the daemon's devfed
folder mirrors the real one, except that devdeltaai's `slurm.conf` is a private copy whose
`SlurmctldPort` is rewritten to a port nothing listens on (to every Slurm client, a stopped
slurmctld). The shared devdeltaai keeps serving every other test; what the test puts there (a
blocker that holds its GPUs, the task's first job) is cancelled whatever happens. The time
it takes is measured by `benchmarks/controller_loss.py`, not asserted here."""

from __future__ import annotations

import shutil
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.domain import JobState, ResourceEnvelope
from fedhpc.ops.tasks import AdaptationPolicy, ResultRequest, SubmitTaskRequest
from fedhpc.placement import PolicyKind
from tests.integration.daemon_util import running, wait_terminal

pytestmark = pytest.mark.devfed

DEAD = "devdeltaai"


def _mirror(devfed: Any, root: Path) -> Path:
    """A devfed folder whose clusters are the real ones, DEAD's config a private copy."""
    root.mkdir()
    for entry in devfed.root.iterdir():
        if entry.name != DEAD:
            (root / entry.name).symlink_to(entry)
    (root / DEAD).mkdir()
    for entry in (devfed.root / DEAD).iterdir():
        if entry.name in ("slurm.conf", "gres.conf"):
            shutil.copy(entry, root / DEAD / entry.name)
        else:
            (root / DEAD / entry.name).symlink_to(entry)
    return root / DEAD / "slurm.conf"


def _write(conf: Path, text: str) -> None:
    tmp = conf.with_suffix(".new")
    tmp.write_text(text)
    tmp.replace(conf)  # a Slurm client reads the old config or the new one, whole


def _dead(text: str) -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    lines = text.splitlines()
    return "\n".join(
        f"SlurmctldPort={free}" if ln.startswith("SlurmctldPort=") else ln for ln in lines
    )


async def _event(client: DaemonClient, kind: str, after: int) -> dict[str, Any]:
    """The first `kind` event about DEAD after seq `after`, once there is one."""
    with anyio.fail_after(120):
        while True:
            for e in await client.events(after=after, limit=1000):
                if e["kind"] == kind and e["subject"] == DEAD:
                    return e
            await anyio.sleep(0.2)


async def test_a_dead_controller_moves_queued_work_and_events_carry_seen_times(
    devfed: Any, tmp_path: Path
) -> None:
    conf = _mirror(devfed, tmp_path / "fed")
    good = conf.read_text()
    blocker = devfed.run(
        DEAD, "sbatch", "--parsable", "-p", "ghx4", "-A", "fedhpc-gpu", "--gres=gpu:gh200:4",
        "-t", "30", "-o", "/dev/null", "--wrap", "sleep 1800",
    )  # fmt: skip
    assert blocker.returncode == 0, blocker.stderr
    jobs = [blocker.stdout.strip().split(";")[0]]
    try:
        async with running(tmp_path / "h", FEDHPC_DEVFED_DIR=str(tmp_path / "fed")) as client:
            envelope = ResourceEnvelope.model_validate(
                {"gpus": {"min": 1, "max": 1}, "cpus": {"min": 1, "max": 1}}
            )
            seq0 = max((int(e["seq"]) for e in await client.events(limit=1000)), default=0)
            handle = await client.submit_task(
                SubmitTaskRequest(
                    command=("sleep", "1"),
                    envelope=envelope,
                    policy=PolicyKind.FIXED_SITE,
                    fixed_site=DEAD,
                    fallback=True,
                    adaptation=AdaptationPolicy(replace_pending=False),
                )
            )
            assert handle.site == DEAD  # fallback only once DEAD cannot run it
            with anyio.fail_after(120):  # in DEAD's queue, and a cycle has seen it there
                while True:
                    r = await client.get_result(ResultRequest(task_id=handle.task_id))
                    first = r.attempts[0] if r.attempts else None
                    if first is not None and first.job_id and first.state is JobState.PENDING:
                        jobs.append(first.job_id)
                        break
                    await anyio.sleep(0.1)
            died = datetime.now(UTC)
            _write(conf, _dead(good))
            try:
                with anyio.fail_after(120):
                    while len(r.attempts) < 2:
                        await anyio.sleep(0.1)
                        r = await client.get_result(ResultRequest(task_id=handle.task_id))
                assert r.attempts[0].superseded
                assert r.attempts[1].site != DEAD
                lost = await _event(client, "site.offline", seq0)
            finally:
                back = datetime.now(UTC)
                _write(conf, good)
            assert "scontrol ping: DOWN" in lost["payload"]["error"]  # the ping found it
            assert datetime.fromisoformat(lost["created_at"]) >= died
            regained = await _event(client, "site.online", int(lost["seq"]))
            assert datetime.fromisoformat(regained["created_at"]) >= back  # never before
            done = await wait_terminal(client, handle.task_id)
            assert done.state is JobState.COMPLETED
            assert done.attempts[-1].site != DEAD
    finally:
        devfed.run(DEAD, "scancel", *jobs)
