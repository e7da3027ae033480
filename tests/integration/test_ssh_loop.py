"""The whole loop over SSH, as users reach real centers: a real `fedhpc daemon` whose devfed
sites are login hosts behind a real sshd (the `over_ssh` fixture): probe, stage-in, submit,
status, a retry, accounting, the output preview, stage-out, cancel, and a ControlMaster that
expires in between (re-opened without prompting, or a `fedhpc connect SITE` error when the
login needs a person)."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from fedhpc.adapters.transports import make_transport
from fedhpc.adapters.transports.ssh import SshTransport
from fedhpc.client.daemon_client import DaemonClient
from fedhpc.domain import JobState, ResourceEnvelope
from fedhpc.domain.site import Health
from fedhpc.ops.data import MoveDataRequest, StageOut, TransferRequest, TransferState
from fedhpc.ops.inspect import SiteView
from fedhpc.ops.tasks import AdaptationPolicy, CancelRequest, ResultRequest, SubmitTaskRequest
from fedhpc.placement import PolicyKind
from fedhpc.profiles import load_federation
from fedhpc_dev.devfed.sshd import SshFront
from tests.integration.conftest import Devfed
from tests.integration.daemon_util import drain, running, wait_terminal

pytestmark = [pytest.mark.devfed, pytest.mark.sshd]

SITE = "devdelta"


@pytest.fixture
def fed(devfed: Devfed, over_ssh: SshFront) -> Iterator[Devfed]:
    drain(devfed)
    yield devfed
    drain(devfed)
    over_ssh.grant(SITE)


def _env(**kw: Any) -> ResourceEnvelope:
    return ResourceEnvelope.model_validate({"wall_time": {"min": "5m"}, **kw})


def _master(home: Path) -> SshTransport:
    """The daemon's transport to SITE, rebuilt here: same spec and state dir, same ControlPath."""
    transport = make_transport(load_federation()[SITE].transport, state_dir=home, name=SITE)
    assert isinstance(transport, SshTransport)
    return transport


async def _control(transport: SshTransport, operation: str) -> int:
    with anyio.fail_after(15):
        done = await anyio.run_process(transport.control_argv(operation), check=False)
    return done.returncode


async def _site(client: DaemonClient) -> SiteView:
    (view,) = [s for s in (await client.refresh()).sites if s.site == SITE]
    return view


async def _attempt_in(client: DaemonClient, task_id: str, state: JobState) -> None:
    with anyio.fail_after(60):
        while True:
            attempts = (await client.get_result(ResultRequest(task_id=task_id))).attempts
            if attempts and attempts[-1].state is state:
                return
            await anyio.sleep(0.5)


async def test_the_whole_loop_runs_over_ssh(
    fed: Devfed, over_ssh: SshFront, tmp_path: Path
) -> None:
    run = "ssh-" + uuid.uuid4().hex[:8]
    source = fed.root / "devanvil/storage" / run / "in.txt"
    source.parent.mkdir(parents=True)
    source.write_text("".join(f"sample {i}\n" for i in range(3000)))
    landed = fed.root / SITE / "storage" / run / "in.txt"
    returned = fed.root / "devvista/storage" / run / "out.txt"
    tasks: list[str] = []
    async with running(tmp_path / "h") as client:
        try:
            # probe: the site answers through sshd, Slurm found by the login's SLURM_CONF
            view = await _site(client)
            assert view.health is Health.OK, view.error
            assert "over ssh" in view.title
            assert {p.name for p in view.partitions} >= {"cpu", "gpuA100x4"}
            # stage-in to the ssh site, then a task that fails once and is retried
            xfer = await client.move_data(
                MoveDataRequest(
                    source=f"devanvil:scratch/{run}/in.txt",
                    destination=f"{SITE}:scratch/{run}/in.txt",
                )
            )
            script = (
                'case "$SLURM_JOB_NAME" in *-1) echo "first attempt fails" >&2; exit 3;; esac; '
                f'sha256sum {landed}; wc -l < {landed} > out.txt; echo "on $SLURM_CLUSTER_NAME"'
            )
            handle = await client.submit_task(
                SubmitTaskRequest(
                    name="ssh-loop",
                    command=("bash", "-c", script),
                    envelope=_env(cpus={"min": 1}),
                    policy=PolicyKind.FIXED_SITE,
                    fixed_site=SITE,
                    stage_in=(xfer.transfer_id,),
                    stage_out=(
                        StageOut(source="out.txt", destination=f"devvista:scratch/{run}/out.txt"),
                    ),
                    adaptation=AdaptationPolicy(max_retries=1),
                )
            )
            tasks.append(handle.task_id)
            done = await wait_terminal(client, handle.task_id, limit=120)
            assert done.state is JobState.COMPLETED, done.reasons
            first, second = done.attempts
            assert (first.site, second.site) == (SITE, SITE)
            assert (first.state, first.exit_code) == (JobState.FAILED, 3)  # status + accounting
            assert (second.state, second.exit_code) == (JobState.COMPLETED, 0)
            assert second.started_at is not None
            assert second.ended_at is not None
            # the output preview, read at the site over ssh
            out = await client.get_result(ResultRequest(task_id=handle.task_id, preview="stdout"))
            assert out.preview is not None
            digest = hashlib.sha256(landed.read_bytes()).hexdigest()
            assert out.preview.split()[0] == digest
            assert out.preview.strip().endswith(f"on {SITE}")
            # stage-out from the ssh site
            directions = {d.direction: d for d in done.data}
            assert directions["stage_in"].state is TransferState.SUCCEEDED
            # the task's outcome can come before its stage-out's copy ends: wait for the copy
            ask = TransferRequest(transfer_id=directions["stage_out"].transfer_id)
            with anyio.fail_after(60):
                while not (back := await client.transfer(ask)).state.terminal:
                    await anyio.sleep(0.5)
            assert back.state is TransferState.SUCCEEDED, back.error
            assert returned.read_text().strip() == "3000"
            # cancel a running job over ssh
            sleeper = await client.submit_task(
                SubmitTaskRequest(
                    command=("sleep", "600"),
                    envelope=_env(),
                    policy=PolicyKind.FIXED_SITE,
                    fixed_site=SITE,
                )
            )
            tasks.append(sleeper.task_id)
            await _attempt_in(client, sleeper.task_id, JobState.RUNNING)
            await client.cancel(CancelRequest(task_id=sleeper.task_id))
            await _attempt_in(client, sleeper.task_id, JobState.CANCELLED)
            gone = await client.get_result(ResultRequest(task_id=sleeper.task_id))
            assert gone.state is JobState.CANCELLED
            assert not fed.run(SITE, "squeue", "-h", "-j", str(sleeper.job_id)).stdout.strip()
        finally:
            for t in tasks:
                await client.cancel(CancelRequest(task_id=t))


async def test_an_expired_master_reopens_by_itself_or_names_fedhpc_connect(
    fed: Devfed, over_ssh: SshFront, tmp_path: Path
) -> None:
    home = tmp_path / "h"
    async with running(home) as client:
        master = _master(home)
        assert (await _site(client)).health is Health.OK
        assert await _control(master, "check") == 0  # the daemon's calls opened a master
        # It expires; the login needs no person (a key): the next call opens a new one.
        assert await _control(master, "exit") == 0
        assert await _control(master, "check") != 0
        assert (await _site(client)).health is Health.OK
        assert await _control(master, "check") == 0
        # Now the login needs a person (as MFA does): calls still ride the open master ...
        over_ssh.revoke(SITE)
        assert (await _site(client)).health is Health.OK
        # ... until it expires; then the site is offline with the one fix a person can do.
        assert await _control(master, "exit") == 0
        view = await _site(client)
        assert view.health is Health.OFFLINE
        assert view.error is not None
        assert f"ssh to {SITE} was refused: " in view.error
        assert f"Run `fedhpc connect {SITE}`" in view.error
        command = view.error.split("open the session yourself: ")[1].rstrip(")")
        assert command.endswith(f"-fN {SITE}")
        # The person runs that command (authenticating once); the site comes back by itself.
        over_ssh.grant(SITE)
        with anyio.fail_after(30):
            opened = await anyio.run_process(["sh", "-c", command], check=False)
        assert opened.returncode == 0, opened.stderr
        over_ssh.revoke(SITE)  # the login needs a person again: only the master works
        assert (await _site(client)).health is Health.OK
        await _control(master, "exit")
