"""The server in process (mcp.Client, legacy handshake) with no daemon behind it: definitions,
typed errors, resources, and a light import."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp_types import CallToolResult
from pydantic import BaseModel

from fedhpc.mcp_server import INSTRUCTIONS, build_server
from fedhpc.mcp_server.results import MAX_RESPONSE_BYTES, guarded
from fedhpc.settings.daemon import DaemonSettings

TOOLS = {
    "inspect_federation",
    "draft_envelope",
    "submit_task",
    "submit_group",
    "get_result",
    "replan",
    "cancel",
    "move_data",
    "list_events",
    "ack_events",
}


@asynccontextmanager
async def connect(tmp_path: Path) -> AsyncIterator[Client]:
    """In the test's own task: anyio's cancel scopes must exit where they were entered."""
    server = build_server(DaemonSettings(home=tmp_path / "nodaemon"), autostart=False)
    async with Client(server, mode="legacy") as connected:
        yield connected


def _error(result: CallToolResult) -> dict[str, Any]:
    assert result.is_error
    body: dict[str, Any] = json.loads(result.content[0].text)  # type: ignore[union-attr]
    assert {"code", "message", "hint"} <= set(body)
    return body


async def test_the_handshake_carries_name_version_and_the_loop_instructions(
    tmp_path: Path,
) -> None:
    async with connect(tmp_path) as client:
        info = client.session.server_info
    assert info is not None
    assert (info.name, info.version) == ("fedhpc", "0.1.0")
    for step in ("Observe", "Plan", "Act", "Yield", "Resume"):
        assert step in INSTRUCTIONS
    assert len(INSTRUCTIONS.splitlines()) <= 10
    assert "move_data" in INSTRUCTIONS
    assert "not available" not in INSTRUCTIONS


async def test_what_the_model_reads_of_tools_list_fits_in_6_kb(tmp_path: Path) -> None:
    """Names, descriptions and input schemas, counted as test_mcp_wire.py counts them on the
    wire (issue 36): here in process, so a unit run catches a parameter that does not fit."""
    async with connect(tmp_path) as client:
        tools = (await client.list_tools()).tools
    read = [
        {"name": t.name, "description": t.description, "inputSchema": t.input_schema} for t in tools
    ]
    size = sum(len(json.dumps(r, separators=(",", ":"), ensure_ascii=False).encode()) for r in read)
    assert size <= 6 * 1024, size


async def test_annotations_are_honest(tmp_path: Path) -> None:
    async with connect(tmp_path) as client:
        tools = {t.name: t.annotations for t in (await client.list_tools()).tools}
    assert set(tools) == TOOLS
    hints = {
        name: (a.read_only_hint, a.destructive_hint, a.idempotent_hint, a.open_world_hint)  # type: ignore[union-attr]
        for name, a in tools.items()
    }
    assert hints["inspect_federation"] == (True, False, True, True)
    assert hints["get_result"][:3] == (True, False, True)
    assert hints["list_events"][:3] == (True, False, True)
    assert hints["draft_envelope"][:2] == (True, False)
    assert hints["submit_task"] == (False, False, True, True)
    assert hints["submit_group"] == (False, False, True, True)
    assert hints["cancel"][:2] == (False, True)
    assert hints["replan"][:2] == (False, False)
    assert hints["move_data"] == (False, False, True, True)


@pytest.mark.parametrize(
    ("tool", "args", "field"),
    [
        ("submit_task", {"envelope": {}}, "command"),
        ("submit_task", {"command": [], "envelope": {}}, "command"),
        ("submit_task", {"command": ["x"], "envelope": {"nodes": {"min": 0}}}, "envelope"),
        ("submit_task", {"command": ["x"], "envelope": {}, "policy": "cheapest"}, "policy"),
        (
            "submit_task",
            {"command": ["x"], "envelope": {}, "adaptation": {"max_retries": 99}},
            "adaptation.max_retries",
        ),
        (
            "submit_group",
            {"objective": "o", "children": [{}], "envelope": {}},
            "children.0.command",
        ),
        ("get_result", {"task_id": "t_1", "max_bytes": 0}, "max_bytes"),
        ("get_result", {"task_id": "../groups/g"}, "task_id"),
        ("cancel", {}, "task_id"),
        ("replan", {"task_id": "t_1", "envelope": {"gpus": {"min": 2, "max": 1}}}, "envelope.gpus"),
        ("inspect_federation", {"arch": "sparc"}, "arch"),
        ("list_events", {"limit": 0}, "limit"),
        ("ack_events", {"consumer": "", "through": 1}, "consumer"),
        ("draft_envelope", {"description": "x", "confidence": 3}, "confidence"),
        ("submit_task", {"command": ["x"], "envelope": {}, "stage_in": "t1"}, "stage_in"),
        ("move_data", {"source": "devanvil:scratch/a"}, "destination"),
        ("move_data", {"source": "a", "destination": "devvista:scratch/a"}, "source"),
        (
            "move_data",
            {"source": "devanvil:scratch/a", "destination": "devvista:scratch/\x01"},
            "destination",
        ),
        (
            "move_data",
            {"source": "a:b/c", "destination": "d:e/f", "sync_level": "fast"},
            "sync_level",
        ),
        ("move_data", {"source": "a:b/c", "destination": "d:e/f", "mode": "move"}, "mode"),
        (
            "move_data",
            {"source": "a:b/c", "destination": "d:e/f", "idempotency_key": ""},
            "idempotency_key",
        ),
        # Bounds validated in full though tools/list does not advertise them (size budget).
        (
            "submit_task",
            {"command": ["x"], "envelope": {}, "idempotency_key": "k" * 201},
            "idempotency_key",
        ),
        (
            "submit_group",
            {
                "objective": "o",
                "children": [{"command": ["x"]}],
                "envelope": {},
                "idempotency_key": "k" * 201,
            },
            "idempotency_key",
        ),
        (
            "move_data",
            {"source": "a:b/c", "destination": "d:e/f", "idempotency_key": "k" * 201},
            "idempotency_key",
        ),
        ("list_events", {"after": 2**53 + 1}, "after"),
        ("ack_events", {"consumer": "c", "through": 2**53 + 1}, "through"),
        # A check across the arguments is named by the fields its message names.
        ("submit_task", {"command": ["x"], "envelope": {}, "policy": "fixed-site"}, "fixed_site"),
    ],
)
async def test_a_validation_error_is_typed_and_names_the_field(
    tmp_path: Path, tool: str, args: dict[str, Any], field: str
) -> None:
    async with connect(tmp_path) as client:
        body = _error(await client.call_tool(tool, args))
    assert body["code"] == "validation"
    assert field in [f["field"] for f in body["fields"]], body
    assert field in body["message"]


async def test_an_unknown_tool_is_a_typed_error_listing_the_tools(tmp_path: Path) -> None:
    async with connect(tmp_path) as client:
        body = _error(await client.call_tool("copy_data", {"src": "a", "dst": "b"}))
    assert body["code"] == "unknown_tool"
    assert "submit_task" in body["hint"]
    assert "move_data" in body["hint"]


async def test_without_a_daemon_a_call_says_so_with_a_hint(tmp_path: Path) -> None:
    async with connect(tmp_path) as client:
        body = _error(await client.call_tool("inspect_federation", {}))
    assert body["code"] == "daemon_unavailable"
    assert "fedhpc daemon" in body["hint"]


async def test_tasks_groups_and_the_snapshot_are_resources(tmp_path: Path) -> None:
    async with connect(tmp_path) as client:
        listed = await client.list_resource_templates()
        resources = {r.uri for r in (await client.list_resources()).resources}
    templates = {t.uri_template for t in listed.resource_templates}
    assert templates == {
        "fedhpc://tasks/{task_id}",
        "fedhpc://groups/{group_id}",
        "fedhpc://groups/{group_id}/after/{after}",
        "fedhpc://transfers/{transfer_id}",
    }
    assert resources == {"fedhpc://federation", "fedhpc://ledger"}


def test_importing_the_server_loads_no_site_adapter_sdk_or_store() -> None:
    code = (
        "import sys, fedhpc.mcp_server, fedhpc.cli.serve, fedhpc.cli.tasks; "
        "print(sorted(m for m in ('globus_sdk', 'globus_compute_sdk', 'aiosqlite', "
        "'fedhpc.adapters', 'fedhpc.store', 'fedhpc.collector', 'fedhpc.orchestrator') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


class Big(BaseModel):
    text: str


async def test_an_answer_over_the_cap_becomes_a_too_large_error_with_a_pointer() -> None:
    @guarded("Read resource fedhpc://x instead.")
    async def big() -> Big:
        return Big(text="x" * MAX_RESPONSE_BYTES)

    result = await big()
    assert isinstance(result, CallToolResult)
    body = _error(result)
    assert body["code"] == "too_large"
    assert body["hint"] == "Read resource fedhpc://x instead."


async def test_a_crash_is_an_internal_error_that_keeps_its_details_off_the_wire() -> None:
    @guarded()
    async def boom() -> Big:
        raise RuntimeError("secret detail")

    result = await boom()
    assert isinstance(result, CallToolResult)
    body = _error(result)
    assert body["code"] == "internal"
    assert "secret detail" not in body["message"]
    assert "RuntimeError" in body["message"]
