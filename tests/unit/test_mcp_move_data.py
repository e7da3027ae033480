"""move_data in process (mcp.Client, legacy handshake) with the daemon's client faked: what it
sends to the daemon (with the continuation, stored with the transfer) and what it answers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.mcp_server import build_server
from fedhpc.mcp_server.tools import TRANSFER_EVENTS
from fedhpc.ops.continuations import ContinuationSpec
from fedhpc.ops.data import (
    DataLocation,
    MoveDataRequest,
    SyncLevel,
    TransferHandle,
    TransferMode,
    TransferRequest,
    TransferState,
    TransferView,
)
from fedhpc.ops.task_views import TaskHandle
from fedhpc.ops.tasks import SubmitTaskRequest
from fedhpc.settings.daemon import DaemonSettings


class FakeDaemon:
    """Records what the tools send; answers like the daemon's transfer service."""

    def __init__(self, state: TransferState = TransferState.QUEUED) -> None:
        self.state = state
        self.moves: list[MoveDataRequest] = []
        self.registered: list[tuple[str, ContinuationSpec]] = []
        self.tasks: list[SubmitTaskRequest] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        fake = self

        async def move_data(_: DaemonClient, req: MoveDataRequest) -> TransferHandle:
            fake.moves.append(req)
            return TransferHandle(
                transfer_id="x0123456789a",
                state=fake.state,
                mode=req.mode,
                source=req.source,
                destination=req.destination,
                backend="local",
                trace=("route: local",),
            )

        async def register(_: DaemonClient, subject: str, spec: ContinuationSpec) -> str:
            fake.registered.append((subject, spec))
            return f"c{subject}"

        async def submit_task(_: DaemonClient, req: SubmitTaskRequest) -> TaskHandle:
            fake.tasks.append(req)
            return TaskHandle(task_id="t0123456789a", state="submitted")

        async def transfer(_: DaemonClient, req: TransferRequest) -> TransferView:
            loc = DataLocation(site="devvista", root="scratch", root_path="/s", path="/s/a.dat")
            return TransferView(
                transfer_id=req.transfer_id,
                state=TransferState.SUCCEEDED,
                mode=TransferMode.REPLICATE,
                source="devanvil:scratch/a.dat",
                destination="devvista:scratch/a.dat",
                backend="local",
                destination_location=loc,
                created_at="2025-01-01T00:00:00Z",
                bytes=12,
                files=1,
                checksums={"a.dat": "0" * 64},
            )

        monkeypatch.setattr(DaemonClient, "move_data", move_data)
        monkeypatch.setattr(DaemonClient, "register_continuation", register)
        monkeypatch.setattr(DaemonClient, "submit_task", submit_task)
        monkeypatch.setattr(DaemonClient, "transfer", transfer)


@asynccontextmanager
async def connect(tmp_path: Path) -> AsyncIterator[Client]:
    server = build_server(DaemonSettings(home=tmp_path / "fake"), autostart=False)
    async with Client(server, mode="legacy") as connected:
        yield connected


REQUEST = {"source": "devanvil:scratch/run1/a.dat", "destination": "devvista:scratch/run1/a.dat"}


async def test_move_data_sends_the_contract_request_and_answers_with_the_handle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FEDHPC_CONTINUATION", raising=False)
    fake = FakeDaemon()
    fake.install(monkeypatch)
    args = {
        **REQUEST,
        "recursive": False,
        "sync_level": "checksum",
        "mode": "stage",
        "verify_checksum": False,
        "idempotency_key": "run1-a",
    }
    async with connect(tmp_path) as client:
        result = await client.call_tool("move_data", args)
        plain = await client.call_tool("move_data", REQUEST)
    assert not plain.is_error, plain.content
    assert not result.is_error, result.content
    handle = TransferHandle.model_validate(result.structured_content)
    assert (handle.transfer_id, handle.state, handle.backend) == ("x0123456789a", "queued", "local")
    # this client names no session: the answer must not promise a resume
    assert "will NOT resume" in handle.next and "End your turn" not in handle.next
    sent = fake.moves[0]
    assert (sent.source, sent.destination) == (REQUEST["source"], REQUEST["destination"])
    assert (sent.mode, sent.sync_level, sent.verify_checksum) == (
        TransferMode.STAGE,
        SyncLevel.CHECKSUM,
        False,
    )
    assert sent.idempotency_key == "run1-a"
    defaults = fake.moves[1]  # the contract's defaults: replicate, verify, copy everything
    assert (defaults.mode, defaults.verify_checksum, defaults.sync_level) == (
        TransferMode.REPLICATE,
        True,
        None,
    )
    assert defaults.idempotency_key is None
    assert fake.registered == []  # nobody to wake: a pull client
    assert sent.continuation is None and defaults.continuation is None


async def test_a_known_agent_session_is_woken_by_the_transfers_own_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = {"runtime": "command", "command": ["/bin/true"]}
    monkeypatch.setenv("FEDHPC_CONTINUATION", json.dumps(spec))
    fake = FakeDaemon()
    fake.install(monkeypatch)
    async with connect(tmp_path) as client:
        result = await client.call_tool("move_data", REQUEST)
    assert not result.is_error
    assert "End your turn" in TransferHandle.model_validate(result.structured_content).next
    # In the request itself, never registered after the answer: the daemon stores it in the
    # transaction that creates the transfer, before any outcome of it can be observed.
    assert fake.registered == []
    (sent,) = fake.moves
    assert sent.continuation is not None
    assert sent.continuation.command == ("/bin/true",)
    assert sent.continuation.events == TRANSFER_EVENTS


async def test_a_transfer_already_ended_answers_where_to_read_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FEDHPC_CONTINUATION", json.dumps({"runtime": "inbox"}))
    fake = FakeDaemon(TransferState.SUCCEEDED)  # a retried call after the copy finished
    fake.install(monkeypatch)
    async with connect(tmp_path) as client:
        result = await client.call_tool("move_data", REQUEST)
    assert not result.is_error
    assert fake.registered == []
    assert TransferHandle.model_validate(result.structured_content).next.startswith("Already")


async def test_submit_task_passes_stage_in_transfer_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FEDHPC_CONTINUATION", raising=False)
    fake = FakeDaemon()
    fake.install(monkeypatch)
    args = {
        "command": ["wc", "-l", "a.dat"],
        "envelope": {"gpus": {"min": 1}},
        "stage_in": ["x0123456789a"],
    }
    async with connect(tmp_path) as client:
        assert not (await client.call_tool("submit_task", args)).is_error
    assert fake.tasks[0].stage_in == ("x0123456789a",)


async def test_the_transfer_view_is_a_resource(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    FakeDaemon().install(monkeypatch)
    async with connect(tmp_path) as client:
        read = await client.read_resource("fedhpc://transfers/x0123456789a")
        with pytest.raises(Exception, match="not an id"):
            await client.read_resource("fedhpc://transfers/x..y")
    view: dict[str, Any] = json.loads(read.contents[0].text)  # type: ignore[union-attr]
    assert view["state"] == "succeeded"
    assert view["checksums"] == {"a.dat": "0" * 64}
    assert view["destination_location"]["path"] == "/s/a.dat"


async def test_the_move_data_schema_is_flat_and_terse(tmp_path: Path) -> None:
    async with connect(tmp_path) as client:
        tool = next(t for t in (await client.list_tools()).tools if t.name == "move_data")
    schema = tool.input_schema
    assert schema["required"] == ["source", "destination"]
    assert set(schema["properties"]) == {
        "source",
        "destination",
        "mode",
        "recursive",
        "sync_level",
        "verify_checksum",
        "idempotency_key",
    }
    assert "$defs" not in schema
    assert all(p.get("type") in {"string", "boolean"} for p in schema["properties"].values())
    size = len(
        json.dumps(
            {"name": tool.name, "description": tool.description, "inputSchema": schema},
            separators=(",", ":"),
        )
    )
    assert size < 800
