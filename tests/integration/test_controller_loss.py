"""A dead controller is found by its ping and its queued work moves (issue 40, item 4): a task
fixed to devdeltaai with `fallback`, waiting in its queue there, gets a new attempt on another
cluster once devdeltaai's controller dies; `site.offline` says the ping found it and, like
`site.online` after the controller is back, carries the time it was seen, never an earlier one.

The controller dies for the test's daemon alone, as in `test_dead_site.py`: the daemon's devfed
folder mirrors the real one, except that devdeltaai's `slurm.conf` is a private copy whose
`SlurmctldPort` is rewritten to a port nothing listens on (to every Slurm client, a stopped
slurmctld). The shared devdeltaai keeps serving every other test; what the test puts there (a
blocker that holds its GPUs, the task's first job) is cancelled whatever happens. The time
it takes is measured by `benchmarks/controller_loss.py`, not asserted here.

A controller that is merely slow (a proxy that holds each connection longer than the
observation's ping deadline, shorter than the probe's) or hung (a socket that never answers)
makes the site *suspect*: the task gets a hedged copy elsewhere at once. The slow one is never
taken offline (the probe's pings answer) and its copy is cancelled when the other starts; the
hung one goes offline after its second silent probe ping, its copy set aside."""

from __future__ import annotations

import shutil
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.domain import JobState, ResourceEnvelope
from fedhpc.ops.task_views import ResultManifest, TaskHandle
from fedhpc.ops.tasks import AdaptationPolicy, ResultRequest, SubmitTaskRequest
from fedhpc.placement import PolicyKind
from tests.integration.daemon_util import running, wait_terminal

SLOW_S = 1.5  # over the observation's ping deadline at a 1 s cycle (1 s), under the probe's (5 s)

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


def _port(text: str) -> int:
    return int(
        next(ln for ln in text.splitlines() if ln.startswith("SlurmctldPort=")).split("=")[1]
    )


def _at(text: str, port: int) -> str:
    lines = text.splitlines()
    return "\n".join(
        f"SlurmctldPort={port}" if ln.startswith("SlurmctldPort=") else ln for ln in lines
    )


async def _pipe(src: anyio.abc.SocketStream, dst: anyio.abc.SocketStream) -> None:
    try:
        async for chunk in src:
            await dst.send(chunk)
        await dst.send_eof()
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass


@asynccontextmanager
async def _controller(kind: str, upstream: int) -> AsyncIterator[int]:
    """A port in front of the real controller at `upstream`: `slow` holds each connection
    SLOW_S before it passes it on; `hung` takes connections and never answers."""
    if kind == "hung":
        with socket.socket() as hung:
            hung.bind(("127.0.0.1", 0))
            hung.listen(4096)
            yield int(hung.getsockname()[1])
        return

    async def serve(client: anyio.abc.SocketStream) -> None:
        async with client:
            await anyio.sleep(SLOW_S)
            up = await anyio.connect_tcp("127.0.0.1", upstream)
            async with up, anyio.create_task_group() as tg:
                tg.start_soon(_pipe, client, up)
                await _pipe(up, client)

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        yield int(listener.extra(anyio.abc.SocketAttribute.local_port))
        tg.cancel_scope.cancel()


def _block(devfed: Any) -> str:
    """A job of the test's own holding all of DEAD's `ghx4` GPUs (a task sent there waits in
    its queue): its job id."""
    blocker = devfed.run(
        DEAD, "sbatch", "--parsable", "-p", "ghx4", "-A", "fedhpc-gpu", "--gres=gpu:gh200:4",
        "-t", "30", "-o", "/dev/null", "--wrap", "sleep 1800",
    )  # fmt: skip
    assert blocker.returncode == 0, blocker.stderr
    return str(blocker.stdout.strip().split(";")[0])


async def _queued_on_dead(
    client: DaemonClient, jobs: list[str]
) -> tuple[int, TaskHandle, ResultManifest]:
    """A 1-GPU task held to DEAD (with `fallback`, never re-placed for its wait), once a
    control cycle has seen it pending there: the event seq before it, its handle and its
    result then; its job id joins `jobs` (cancelled at the end)."""
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
    with anyio.fail_after(120):  # in DEAD's queue, and a cycle has seen it there
        while True:
            r = await client.get_result(ResultRequest(task_id=handle.task_id))
            first = r.attempts[0] if r.attempts else None
            if first is not None and first.job_id and first.state is JobState.PENDING:
                jobs.append(first.job_id)
                return seq0, handle, r
            await anyio.sleep(0.1)


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
    jobs = [_block(devfed)]
    try:
        async with running(tmp_path / "h", FEDHPC_DEVFED_DIR=str(tmp_path / "fed")) as client:
            seq0, handle, r = await _queued_on_dead(client, jobs)
            assert handle.site == DEAD  # fallback only once DEAD cannot run it
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


@pytest.mark.parametrize("kind", ["slow", "hung"])
async def test_a_silent_ping_hedges_queued_work_and_only_a_hung_controller_goes_offline(
    devfed: Any, tmp_path: Path, kind: str
) -> None:
    conf = _mirror(devfed, tmp_path / "fed")
    good = conf.read_text()
    jobs = [_block(devfed)]
    env = {"FEDHPC_DEVFED_DIR": str(tmp_path / "fed"), "FEDHPC_PROBE_TIMEOUT_S": "40"}
    try:
        async with running(tmp_path / "h", **env) as client:
            seq0, handle, r = await _queued_on_dead(client, jobs)
            async with _controller(kind, _port(good)) as port:
                _write(conf, _at(good, port))
                try:
                    with anyio.fail_after(120):
                        while len(r.attempts) < 2:
                            await anyio.sleep(0.1)
                            r = await client.get_result(ResultRequest(task_id=handle.task_id))
                    assert r.attempts[1].site != DEAD and r.attempts[1].copy_of == 1
                    if kind == "hung":
                        lost = await _event(client, "site.offline", seq0)
                        assert "did not answer" in lost["payload"]["error"]
                    else:
                        done = await wait_terminal(client, handle.task_id)
                finally:
                    _write(conf, good)
            done = await wait_terminal(client, handle.task_id)
            assert done.state is JobState.COMPLETED
            first, copy = done.attempts
            assert copy.site != DEAD and first.superseded
            events = await client.events(after=seq0, limit=1000)
            offline = [e for e in events if e["kind"] == "site.offline" and e["subject"] == DEAD]
            if kind == "slow":  # slow, not lost: no agent was told otherwise
                assert offline == []
                assert first.outrun_by == copy.n
    finally:
        devfed.run(DEAD, "scancel", *jobs)
