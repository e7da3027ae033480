"""`fedhpc serve` over stdio with the real MCP client in legacy mode (the handshake Claude Code
and Codex use), against a real daemon on the local Slurm federation."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_types import CallToolResult

from fedhpc.ops.draft import EnvelopeDraft
from fedhpc.ops.inspect import FederationView
from fedhpc.ops.task_views import GroupView, ResultManifest, TaskHandle
from tests.integration.daemon_util import daemon_for_module
from tests.integration.mcp_support import kill_daemon_of, serve_wired, stdio_params

pytestmark = pytest.mark.devfed

SITES = ["devanvil", "devdelta", "devdeltaai", "devvista"]
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
SMALL = {"cpus": {"min": 1, "max": 2}, "wall_time": {"min": "5m"}}


@pytest.fixture
def fed(devfed: Any) -> Any:
    """The running federation. Not drained: these tests clean up only their own jobs, so they
    can share the federation with other test runs."""
    return devfed


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One daemon for the module: each test starts its own `fedhpc serve` on it and reads or
    cleans up only its own work (its task, its group, its continuation)."""
    yield from daemon_for_module(tmp_path_factory.mktemp("stdio") / "h")


def _error(result: CallToolResult) -> dict[str, Any]:
    assert result.is_error, result
    assert result.structured_content is None
    body: dict[str, Any] = json.loads(result.content[0].text)  # type: ignore[union-attr]
    assert set(body) >= {"code", "message", "hint"}
    return body


async def _call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    body: dict[str, Any] = result.structured_content  # a tool's structured answer: an object
    return body


def test_serve_is_wired_into_the_fedhpc_command() -> None:
    assert serve_wired(), "add `serve.add_parser(sub)` and `tasks.add_parser(sub)` to cli/main.py"


async def test_lists_every_tool_with_input_and_output_schema_and_annotations(
    daemon: Path,
) -> None:
    home = daemon
    async with Client(stdio_params(home, "--no-autostart"), mode="legacy") as client:
        assert client.session.protocol_version == "2025-11-25"
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.description
        assert tool.input_schema["type"] == "object"
        assert tool.output_schema is not None
        assert tool.output_schema["type"] == "object"
        assert tool.output_schema["properties"]
        assert tool.annotations is not None
    ann = {n: t.annotations for n, t in tools.items()}
    assert ann["inspect_federation"].read_only_hint is True  # type: ignore[union-attr]
    assert ann["get_result"].idempotent_hint is True  # type: ignore[union-attr]
    assert ann["cancel"].destructive_hint is True  # type: ignore[union-attr]
    assert ann["submit_task"].destructive_hint is False  # type: ignore[union-attr]
    assert ann["submit_task"].read_only_hint is False  # type: ignore[union-attr]
    assert ann["submit_task"].open_world_hint is True  # type: ignore[union-attr]


async def test_inspect_federation_shows_the_four_sites_with_partitions(
    daemon: Path,
) -> None:
    home = daemon
    async with Client(stdio_params(home, "--no-autostart"), mode="legacy") as client:
        view = FederationView.model_validate(await _call(client, "inspect_federation"))
        gpu_only = FederationView.model_validate(
            await _call(client, "inspect_federation", accelerator="gh200", refresh=True)
        )
    assert [s.site for s in view.sites] == SITES
    assert all(s.partitions for s in view.sites)
    assert {s.site for s in gpu_only.sites} == {"devdeltaai", "devvista"}
    assert all(p.accelerator == "gh200" for s in gpu_only.sites for p in s.partitions)


async def test_submit_task_then_get_result_after_it_completes(fed: Any, daemon: Path) -> None:
    home = daemon
    async with Client(stdio_params(home, "--no-autostart"), mode="legacy") as client:
        args = {
            "command": ["bash", "-c", "echo hello-from-mcp"],
            "envelope": SMALL,
            "name": "mcp-hello",
        }
        handle = TaskHandle.model_validate(await _call(client, "submit_task", **args))
        assert handle.state.value == "submitted" and handle.attempt == 1  # placed
        assert handle.site in SITES
        # This client has no continuation (not Codex, not Claude Code, no
        # FEDHPC_CONTINUATION): the answer must not tell it to wait for a resume.
        assert "End your turn" not in handle.next
        assert "nothing will resume" in handle.next
        again = TaskHandle.model_validate(await _call(client, "submit_task", **args))
        assert again.task_id == handle.task_id  # idempotent: no second job
        with anyio.fail_after(120):
            while True:
                got = await _call(client, "get_result", task_id=handle.task_id, preview="stdout")
                manifest = ResultManifest.model_validate(got)
                if manifest.state.terminal:
                    break
                await anyio.sleep(1)
        resource = await client.read_resource(f"fedhpc://tasks/{handle.task_id}")
    assert manifest.state.value == "completed"
    assert manifest.preview is not None
    assert "hello-from-mcp" in manifest.preview
    # Recorded after the answer, which came on placement; its one job is flattened into the
    # brief answer, the resource keeps the attempt.
    assert manifest.job_id and not manifest.attempts
    text = resource.contents[0].text  # type: ignore[union-attr]
    assert json.loads(text)["task_id"] == handle.task_id
    assert json.loads(text)["attempts"][0]["job_id"] == manifest.job_id


async def test_submit_group_answers_for_all_children(fed: Any, daemon: Path) -> None:
    home = daemon
    async with Client(stdio_params(home, "--no-autostart"), mode="legacy") as client:
        group = GroupView.model_validate(
            await _call(
                client,
                "submit_group",
                objective="two seeds",
                children=[
                    {"command": ["bash", "-c", "echo seed 1"], "name": "s1"},
                    {"command": ["bash", "-c", "echo seed 2"], "name": "s2"},
                ],
                envelope=SMALL,
            )
        )
        assert len(group.children) == 2
        read = await client.read_resource(f"fedhpc://groups/{group.group_id}")
        assert json.loads(read.contents[0].text)["group_id"] == group.group_id  # type: ignore[union-attr]
        for child in group.children:
            await _call(client, "cancel", task_id=child.task_id)


async def test_draft_envelope_reads_a_stated_zero_a_minimum_and_an_elastic_node_range(
    daemon: Path,
) -> None:
    home = daemon
    async with Client(stdio_params(home, "--no-autostart"), mode="legacy") as client:
        none = EnvelopeDraft.model_validate(
            await _call(client, "draft_envelope", description="tokenize the corpus, no GPUs")
        )
        elastic = EnvelopeDraft.model_validate(
            await _call(
                client,
                "draft_envelope",
                description="train on 8 or more gpus",
                code_context=["torchrun --nnodes=1:4 train.py"],
            )
        )
    assert none.envelope is not None and none.envelope.gpus.upper == 0
    assert "no GPUs (stated 'no GPUs': read as none)" in none.rationale
    e = elastic.envelope
    assert e is not None and (e.gpus.min, e.nodes.min, e.nodes.upper) == (8, 1, 4)
    assert "is a minimum" in elastic.rationale and "is elastic" in elastic.rationale


async def test_bad_inputs_return_typed_errors_that_name_the_field(
    daemon: Path,
) -> None:
    home = daemon
    async with Client(stdio_params(home, "--no-autostart"), mode="legacy") as client:
        missing = _error(await client.call_tool("submit_task", {"command": ["true"]}))
        inverted = _error(
            await client.call_tool(
                "submit_task",
                {"command": ["true"], "envelope": {"gpus": {"min": 4, "max": 1}}},
            )
        )
        wrong_type = _error(await client.call_tool("get_result", {"task_id": 7}))
        unknown_key = _error(
            await client.call_tool("submit_task", {"command": ["true"], "envelope": {"gpu": 1}})
        )
        no_task = _error(await client.call_tool("get_result", {"task_id": "t_nope"}))
        no_tool = _error(await client.call_tool("copy_data", {}))
    assert missing["code"] == "validation"
    assert [f["field"] for f in missing["fields"]] == ["envelope"]
    assert inverted["fields"][0]["field"] == "envelope.gpus"
    assert "below min" in inverted["message"]
    assert wrong_type["fields"][0]["field"] == "task_id"
    assert unknown_key["fields"][0]["field"] == "envelope.gpu"
    assert no_task["code"] not in {"internal", "validation"}
    assert "t_nope" in no_task["message"]
    assert no_tool["code"] == "unknown_tool"


async def test_the_server_starts_the_daemon_when_its_socket_does_not_answer(
    tmp_path: Path, devfed: Any
) -> None:
    home = tmp_path / "fresh"
    assert not (home / "daemon.sock").exists()
    try:
        async with Client(stdio_params(home), mode="legacy") as client:
            with anyio.fail_after(60):
                view = FederationView.model_validate(await _call(client, "inspect_federation"))
        assert [s.site for s in view.sites] == SITES
        assert (home / "daemon.sock").exists()  # detached: it outlives the server
    finally:
        kill_daemon_of(home)


async def test_a_codex_submission_carries_its_thread_as_the_continuation(
    fed: Any, daemon: Path
) -> None:
    home = daemon
    thread = "019a7b1c-0000-7000-8000-00000000cafe"
    meta: Any = {
        "threadId": thread,
        "x-codex-turn-metadata": {"thread_id": thread, "turn_id": "1"},
    }
    async with Client(stdio_params(home, "--no-autostart"), mode="legacy") as client:
        result = await client.call_tool(
            "submit_task",
            {"command": ["bash", "-c", "true"], "envelope": SMALL, "name": "codex"},
            meta=meta,
        )
    assert not result.is_error, result.content
    task_id = result.structured_content["task_id"]
    uri = f"file:{home / 'fedhpc.db'}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
        rows = db.execute(
            "SELECT runtime, body FROM continuations WHERE subject = ?", (task_id,)
        ).fetchall()
    assert [(r[0], json.loads(r[1])["session_id"]) for r in rows] == [("codex", thread)]
