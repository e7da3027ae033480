"""Data movement on the real local federation: the local backend between two sites' storage
roots, and the two-stage workflow (CPU preprocessing on one site, a stage-out replicating its
output, a GPU task on another site reading it), served over the daemon's REST socket.

The services run in-process here (collector, orchestrator, transfers, the REST app with the
data routes) until `fedhpc daemon` starts the transfer service itself."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from fedhpc.adapters.site import open_adapter
from fedhpc.client.daemon_client import DaemonClient
from fedhpc.collector import Collector
from fedhpc.daemon.app import build_app
from fedhpc.daemon.rest import RestServer
from fedhpc.daemon.server import _bind
from fedhpc.daemon.state import DaemonState
from fedhpc.domain import JobState, ResourceEnvelope
from fedhpc.errors import FedError
from fedhpc.ops.data import (
    MoveDataRequest,
    StageOut,
    TransferHandle,
    TransferRequest,
    TransferState,
    TransferView,
)
from fedhpc.ops.tasks import CancelRequest, ResultRequest, SubmitTaskRequest
from fedhpc.orchestrator import Orchestrator
from fedhpc.placement import PolicyKind
from fedhpc.profiles import load_federation
from fedhpc.settings.daemon import DaemonSettings
from fedhpc.store import Store
from fedhpc.transfer.service import TransferService
from tests.integration.daemon_util import wait_terminal

pytestmark = pytest.mark.devfed


@asynccontextmanager
async def serving(home: Path) -> AsyncIterator[DaemonClient]:
    """The daemon's services and REST app on its Unix socket, with the data routes."""
    settings = DaemonSettings(
        home=home, refresh_s=1, cycle_s=1, probe_timeout_s=6, intent_grace_s=5
    )
    settings.home.mkdir(parents=True, exist_ok=True, mode=0o700)
    store = await Store.open(settings.db_path)
    sites = load_federation()
    adapters = {name: open_adapter(site) for name, site in sites.items()}
    collector = Collector(sites, adapters, store, refresh_s=1, probe_timeout_s=6, history_keep=50)
    orch = Orchestrator(store, collector, adapters, cycle_s=1, intent_grace_s=5)
    transfers = TransferService(
        store,
        sites,
        adapters,
        home=home,
        cycle_s=0.5,
        on_change=lambda: orch.wake.set(),  # noqa: PLW0108 (wake is replaced each cycle)
    )
    state = DaemonState(store, collector, datetime.now(UTC), orch)
    state.transfers = transfers
    app = build_app(state)
    server = RestServer(app)
    sock = _bind(settings.socket_path)
    stopping = anyio.Event()
    await collector.load()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(collector.run, stopping)
            tg.start_soon(orch.run, stopping)
            tg.start_soon(transfers.run, stopping)
            tg.start_soon(server.serve, [sock])
            async with DaemonClient(settings) as client:
                await client.wait_until_up(30)
                await client.refresh()
                yield client
            stopping.set()
            server.should_exit = True
            collector.wake.set()
            orch.wake.set()
            transfers.wake.set()
    finally:
        sock.close()
        for a in adapters.values():
            await a.transport.aclose()
        await store.close()


async def move_data(client: DaemonClient, req: MoveDataRequest) -> TransferHandle:
    return await client.move_data(req)


async def transfer(client: DaemonClient, req: TransferRequest) -> TransferView:
    return await client.transfer(req)


async def wait_transfer(client: DaemonClient, transfer_id: str, limit: float = 60) -> TransferView:
    with anyio.fail_after(limit):
        while True:
            view = await transfer(client, TransferRequest(transfer_id=transfer_id))
            if view.state.terminal:
                return view
            await anyio.sleep(0.3)


def _env(**kw: Any) -> ResourceEnvelope:
    return ResourceEnvelope.model_validate({"wall_time": {"min": "5m"}, **kw})


@pytest.fixture
def run_id() -> str:
    return "xfer-" + uuid.uuid4().hex[:8]


async def test_move_data_copies_between_two_sites_and_previews_only_on_request(
    devfed: Any, tmp_path: Path, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FEDHPC_DEVFED", "1")
    src = devfed.root / "devanvil/storage" / run_id / "data.txt"
    src.parent.mkdir(parents=True)
    src.write_text("".join(f"row {i}\n" for i in range(5000)))
    async with serving(tmp_path / "h") as client:
        req = MoveDataRequest(
            source=f"devanvil:scratch/{run_id}/data.txt",
            destination=f"devvista:scratch/{run_id}/data.txt",
        )
        handle = await move_data(client, req)
        assert (await move_data(client, req)).transfer_id == handle.transfer_id
        view = await wait_transfer(client, handle.transfer_id)
        assert view.state is TransferState.SUCCEEDED
        assert view.preview is None
        dst = devfed.root / "devvista/storage" / run_id / "data.txt"
        assert view.checksums == {"data.txt": hashlib.sha256(dst.read_bytes()).hexdigest()}
        assert view.bytes == src.stat().st_size
        peek = await transfer(
            client, TransferRequest(transfer_id=handle.transfer_id, preview=True, max_bytes=12)
        )
        assert (peek.preview, peek.truncated) == ("row 0\nrow 1\n", True)
        events = [(e["kind"], e["subject"]) for e in await client.events()]
        assert events == [("transfer.succeeded", handle.transfer_id)]
        with pytest.raises(FedError) as exc:
            await move_data(
                client,
                MoveDataRequest(
                    source="devanvil:scratch/../../etc/passwd",
                    destination=f"devvista:scratch/{run_id}/p",
                ),
            )
        assert exc.value.code == "path_traversal"


async def test_two_stage_workflow_preprocess_replicate_then_gpu_with_one_event(
    devfed: Any, tmp_path: Path, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FEDHPC_DEVFED", "1")
    landed = devfed.root / "devdeltaai/storage" / run_id / "features.dat"
    tasks: list[str] = []
    async with serving(tmp_path / "h") as client:
        try:
            pre = await client.submit_task(
                SubmitTaskRequest(
                    name="preprocess",
                    command=("bash", "-c", "mkdir -p pre && seq 1 30000 > pre/features.dat"),
                    envelope=_env(cpus={"min": 1, "max": 2}),
                    policy=PolicyKind.FIXED_SITE,
                    fixed_site="devanvil",
                    stage_out=(
                        StageOut(
                            source="pre/features.dat",
                            destination=f"devdeltaai:scratch/{run_id}/features.dat",
                        ),
                    ),
                )
            )
            tasks.append(pre.task_id)
            (xfer,) = pre.transfers
            train = await client.submit_task(
                SubmitTaskRequest(
                    name="train",
                    command=("bash", "-c", f"sha256sum {landed}; wc -l < {landed}"),
                    envelope=_env(gpus={"min": 1, "max": 1}),
                    stage_in=(xfer,),
                )
            )
            tasks.append(train.task_id)
            assert train.state is JobState.SUBMITTED
            assert train.job_id is None  # waits for its stage-in
            assert "waiting for stage-in" in train.decision
            done = await wait_terminal(client, train.task_id, limit=180)
            assert done.state is JobState.COMPLETED
            (attempt,) = done.attempts
            assert attempt.site == "devdeltaai"
            (data,) = done.data
            digest = hashlib.sha256(landed.read_bytes()).hexdigest()
            assert (data.transfer_id, data.direction) == (xfer, "stage_in")
            assert (data.source_site, data.destination_site) == ("devanvil", "devdeltaai")
            assert data.after_task == pre.task_id
            assert data.checksums == {"features.dat": digest}
            assert data.destination_path == str(landed)
            out = await client.get_result(ResultRequest(task_id=train.task_id, preview="stdout"))
            assert out.preview is not None
            assert out.preview.split()[0] == digest  # the GPU task read what arrived
            assert out.preview.split()[-1] == "30000"
            first = await client.get_result(ResultRequest(task_id=pre.task_id))
            assert first.attempts[-1].site == "devanvil"
            assert [d.direction for d in first.data] == ["stage_out"]
            await anyio.sleep(2.5)  # more cycles: still exactly one event
            events = [(e["kind"], e["subject"]) for e in await client.events()]
            assert events == [("task.terminal", train.task_id)]
        finally:
            for t in tasks:  # only our own jobs
                await client.cancel(CancelRequest(task_id=t))


async def test_a_stage_out_of_a_link_leaving_the_root_fails_the_next_task_with_one_event(
    devfed: Any, tmp_path: Path, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FEDHPC_DEVFED", "1")
    outside = tmp_path / "outside.txt"
    outside.write_text("must never be copied")
    tasks: list[str] = []
    async with serving(tmp_path / "h") as client:
        try:
            pre = await client.submit_task(
                SubmitTaskRequest(
                    command=("bash", "-c", f"ln -sf {outside} leak.txt"),
                    envelope=_env(),
                    policy=PolicyKind.FIXED_SITE,
                    fixed_site="devanvil",
                    stage_out=(
                        StageOut(
                            source="leak.txt", destination=f"devdeltaai:scratch/{run_id}/leak.txt"
                        ),
                    ),
                )
            )
            tasks.append(pre.task_id)
            nxt = await client.submit_task(
                SubmitTaskRequest(
                    command=("cat", "leak.txt"), envelope=_env(), stage_in=pre.transfers
                )
            )
            tasks.append(nxt.task_id)
            done = await wait_terminal(client, nxt.task_id, limit=120)
            assert done.state is JobState.FAILED
            assert done.attempts == ()  # never dispatched
            assert "outside_root" in done.reasons[0]
            view = await transfer(client, TransferRequest(transfer_id=pre.transfers[0]))
            assert view.error is not None
            assert view.error.code == "outside_root"
            assert not (devfed.root / "devdeltaai/storage" / run_id).exists()
            await anyio.sleep(2.5)
            events = [(e["kind"], e["subject"]) for e in await client.events()]
            assert events == [("task.stage_in_failed", nxt.task_id)]
        finally:
            for t in tasks:
                await client.cancel(CancelRequest(task_id=t))


async def test_a_waiting_task_and_its_transfer_survive_a_daemon_restart(
    devfed: Any, tmp_path: Path, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FEDHPC_DEVFED", "1")
    home = tmp_path / "h"
    landed = devfed.root / "devdeltaai/storage" / run_id / "in.dat"
    tasks: list[str] = []
    async with serving(home) as client:
        pre = await client.submit_task(
            SubmitTaskRequest(
                command=("bash", "-c", "sleep 4; seq 1 100 > out.dat"),
                envelope=_env(),
                policy=PolicyKind.FIXED_SITE,
                fixed_site="devanvil",
                stage_out=(
                    StageOut(source="out.dat", destination=f"devdeltaai:scratch/{run_id}/in.dat"),
                ),
            )
        )
        nxt = await client.submit_task(
            SubmitTaskRequest(
                command=("wc", "-l", str(landed)),
                envelope=_env(gpus={"min": 1}),
                stage_in=pre.transfers,
            )
        )
        tasks += [pre.task_id, nxt.task_id]
    # the daemon is down while the first task runs; a new one resumes from the store alone
    async with serving(home) as client:
        try:
            done = await wait_terminal(client, nxt.task_id, limit=180)
            assert done.state is JobState.COMPLETED
            assert done.attempts[-1].site == "devdeltaai"
            assert done.data[0].state is TransferState.SUCCEEDED
            events = [(e["kind"], e["subject"]) for e in await client.events()]
            assert events == [("task.terminal", nxt.task_id)]
        finally:
            for t in tasks:
                await client.cancel(CancelRequest(task_id=t))
