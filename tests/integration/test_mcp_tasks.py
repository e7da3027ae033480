"""The Tasks extension (`io.modelcontextprotocol/tasks`) at 2026-07-28, through the MCP Python
SDK's client over stdio and streamable HTTP, against a real daemon on private local-process
sites (dialect `process`: no Slurm). A client that declares the extension submits, then only
listens: the terminal status arrives on the subscription stream with no tasks/get and no
get_result, across a daemon restart; tasks/cancel on a group cancels its children; another
session's handle is a typed "not found"; a 2025-11-25 client gets the plain answer."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError
from mcp.types import (
    CallToolResult,
    SubscriptionFilter,
    SubscriptionsListenRequest,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
)

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.domain import JobState
from fedhpc.ops.tasks import ResultRequest
from fedhpc.settings.daemon import DaemonSettings
from tests.integration.daemon_util import start, stop
from tests.integration.mcp_support import serve_argv, serve_env, stdio_params
from tests.integration.tasks_client import CreatedTask, tasks_client

CPU = {"gpus": {"min": 0, "max": 0}, "cpus": {"min": 1}, "wall_time": {"min": "5m"}}


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"FEDHPC_DEVFED": "process", "FEDHPC_DEVFED_DIR": str(tmp_path / "devfed")}


@asynccontextmanager
async def daemon(home: Path, env: dict[str, str]) -> AsyncIterator[DaemonClient]:
    proc = start(home, **env)
    try:
        async with DaemonClient(DaemonSettings.from_env(home=home)) as client:
            await client.wait_until_up(30)
            await client.refresh()
            yield client
    finally:
        stop(proc)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def _serve_http(tmp_path: Path, env: dict[str, str]) -> Iterator[str]:
    port = _port()
    with (tmp_path / f"serve-http-{port}.err").open("wb") as err:
        proc = subprocess.Popen(
            serve_argv("--http", "--port", str(port), "--no-autostart"),
            env=serve_env(tmp_path / "h", **env),
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=15)


@pytest.fixture
def http_server(tmp_path: Path, env: dict[str, str]) -> Iterator[str]:
    with _serve_http(tmp_path, env) as url:
        yield url


async def _running(rest: DaemonClient, task_id: str) -> None:
    """Until the job runs (its attempt says so; the daemon's REST API, not the MCP client)."""
    with anyio.fail_after(60):
        while True:
            r = await rest.get_result(ResultRequest(task_id=task_id))
            if r.attempts and r.attempts[-1].state is JobState.RUNNING:
                return
            assert not r.state.terminal, r
            await anyio.sleep(0.2)


def _created(answer: CreatedTask | CallToolResult) -> CreatedTask:
    assert isinstance(answer, CreatedTask), answer
    assert answer.status == "working"
    assert answer.poll_interval_ms is not None and answer.poll_interval_ms >= 1000
    return answer


async def test_stdio_client_waits_on_the_stream_only_across_a_daemon_restart(
    tmp_path: Path, env: dict[str, str]
) -> None:
    home = tmp_path / "h"
    proc = start(home, **env)
    try:
        async with (
            DaemonClient(DaemonSettings.from_env(home=home)) as rest,
            tasks_client(stdio_params(home, "--no-autostart", **env)) as c,
        ):
            await rest.wait_until_up(30)
            await rest.refresh()
            assert c.client.session.protocol_version == "2026-07-28"
            created = _created(
                await c.call("submit_task", {"command": ["sleep", "15"], "envelope": CPU})
            )
            fid = created.task_id.split(".")[1]
            async with c.listen(created.task_id):
                await _running(rest, fid)
                stop(proc)  # the daemon goes away while the job runs, and comes back
                proc = start(home, **env)
                with anyio.fail_after(120):
                    note = await c.tasks.terminal(created.task_id)
            assert note["status"] == "completed"
            assert note["result"]["isError"] is False
            assert '"state":"completed"' in note["result"]["content"][0]["text"]
            assert note["_meta"]["fedhpc/event"].startswith("ev_")
            assert isinstance(note["_meta"]["fedhpc/seq"], int)
            assert c.sent == {"tools/call:submit_task": 1, "subscriptions/listen": 1}
    finally:
        stop(proc)


async def test_http_client_waits_on_the_stream_and_tasks_get_agrees(
    tmp_path: Path, env: dict[str, str], http_server: str
) -> None:
    async with daemon(tmp_path / "h", env), tasks_client(http_server) as c:
        assert c.client.session.protocol_version == "2026-07-28"
        created = _created(
            await c.call("submit_task", {"command": ["sleep", "1"], "envelope": CPU})
        )
        async with c.listen(created.task_id):
            with anyio.fail_after(120):
                note = await c.tasks.terminal(created.task_id)
        assert c.sent == {"tools/call:submit_task": 1, "subscriptions/listen": 1}
        got = await c.task_request("tasks/get", created.task_id)
        assert got["status"] == note["status"] == "completed"
        assert got["result"] == note["result"]


async def test_a_handle_outlives_the_server_that_minted_it(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Issue 36: the handle is signed with the home's key, so a new `fedhpc serve` resolves it."""
    async with daemon(tmp_path / "h", env) as rest:
        with _serve_http(tmp_path, env) as first:
            async with tasks_client(first) as c:
                created = _created(
                    await c.call("submit_task", {"command": ["sleep", "1"], "envelope": CPU})
                )
        with _serve_http(tmp_path, env) as second:  # the first server process is gone
            async with tasks_client(second) as c:
                got = await c.task_request("tasks/get", created.task_id)
                assert got["taskId"] == created.task_id
                fid = created.task_id.split(".")[1]
                await rest.get_result(ResultRequest(task_id=fid))  # the same fedhpc task
                with anyio.fail_after(120):
                    while got["status"] == "working":
                        await anyio.sleep(0.5)
                        got = await c.task_request("tasks/get", created.task_id)
                assert got["status"] == "completed", got
                forged = f"t.{fid}.0000000000000000"
                with pytest.raises(MCPError) as missing:
                    await c.task_request("tasks/get", forged)
                assert missing.value.error.code == -32602
    assert (tmp_path / "h" / "mcp-task-key").stat().st_mode & 0o777 == 0o600


async def test_tasks_cancel_ends_a_group_and_a_task_on_an_open_stream(
    tmp_path: Path, env: dict[str, str]
) -> None:
    home = tmp_path / "h"
    children = [{"command": ["sleep", "300"], "name": f"c{i}"} for i in range(3)]
    async with (
        daemon(home, env) as rest,
        tasks_client(stdio_params(home, "--no-autostart", **env)) as c,
    ):
        created = _created(
            await c.call(
                "submit_group", {"objective": "sweep", "children": children, "envelope": CPU}
            )
        )
        gid = created.task_id.split(".")[1]
        one = _created(await c.call("submit_task", {"command": ["sleep", "300"], "envelope": CPU}))
        # The stream is open (acknowledged) before each cancel: a cancel on request wakes
        # no continuation, yet every stream following the work hears that it ended.
        async with c.listen(created.task_id, one.task_id):
            for handle in (created.task_id, one.task_id):
                acked = await c.task_request("tasks/cancel", handle)
                assert acked["resultType"] == "complete"
            with anyio.fail_after(120):
                note = await c.tasks.terminal(created.task_id)
                alone = await c.tasks.terminal(one.task_id)
        assert note["status"] == alone["status"] == "cancelled"
        view = await rest.group(gid)
        assert view.counts == {"cancelled": 3}, view.counts
        assert c.sent["tasks/get"] == 0


async def test_another_sessions_task_is_not_found_and_a_legacy_client_gets_the_answer(
    tmp_path: Path, env: dict[str, str]
) -> None:
    home = tmp_path / "h"
    params = stdio_params(home, "--no-autostart", **env)
    async with daemon(home, env), tasks_client(params) as a, tasks_client(params) as b:
        created = _created(await a.call("submit_task", {"command": ["true"], "envelope": CPU}))
        fid = created.task_id.split(".")[1]
        for stranger in (created.task_id, fid, f"t.{fid}.0000000000000000"):
            with pytest.raises(MCPError) as missing:
                await b.task_request("tasks/get", stranger)
            assert missing.value.error.code == -32602
            data = missing.value.error.data
            assert isinstance(data, dict) and data["code"] == "not_found" and data["hint"]
        assert (await a.task_request("tasks/get", created.task_id))["taskId"] == created.task_id
        too_many = SubscriptionFilter.model_validate({"taskIds": [created.task_id] * 101})
        with pytest.raises(MCPError) as refused:
            await a.client.session.send_request(
                SubscriptionsListenRequest(
                    params=SubscriptionsListenRequestParams(notifications=too_many)
                ),
                SubscriptionsListenResult,
            )
        assert refused.value.error.code == -32602
        async with Client(params, mode="legacy") as legacy:
            answer = await legacy.call_tool("submit_task", {"command": ["true"], "envelope": CPU})
            assert isinstance(answer, CallToolResult) and not answer.is_error
            assert answer.structured_content and answer.structured_content["task_id"]


async def test_the_example_waits_without_hooks(tmp_path: Path, env: dict[str, str]) -> None:
    """examples/wait_without_hooks.py, as a user runs it: its call_tool returns the result."""
    home = tmp_path / "h"
    script = Path(__file__).resolve().parents[2] / "examples" / "wait_without_hooks.py"
    async with daemon(home, env):
        done = await anyio.run_process(
            [sys.executable, str(script)],
            env={**serve_env(home, **env)},
            check=False,
        )
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert '"state":"completed"' in out
    assert '"preview":"hello\\n"' in out


async def test_a_subscribed_task_resource_is_updated_on_the_stream(
    tmp_path: Path, env: dict[str, str], http_server: str
) -> None:
    """Resources that subscribe (2026-07-28): fedhpc://tasks/{id} gets resources/updated on
    each event about the task, without the extension's notifications."""
    async with daemon(tmp_path / "h", env), tasks_client(http_server) as c:
        created = _created(
            await c.call("submit_task", {"command": ["sleep", "1"], "envelope": CPU})
        )
        uri = f"fedhpc://tasks/{created.task_id.split('.')[1]}"
        async with c.listen(uris=(uri,)):
            with anyio.fail_after(120):
                while uri not in c.updated:
                    await anyio.sleep(0.1)
        assert c.tasks.notes == []  # no taskIds asked: no task notifications


async def test_a_group_ends_on_the_stream_when_its_round_ends(
    tmp_path: Path, env: dict[str, str]
) -> None:
    home = tmp_path / "h"
    children = [{"command": ["true"], "name": f"c{i}"} for i in range(2)]
    async with daemon(home, env), tasks_client(stdio_params(home, "--no-autostart", **env)) as c:
        created = _created(
            await c.call(
                "submit_group", {"objective": "pair", "children": children, "envelope": CPU}
            )
        )
        async with c.listen(created.task_id):
            with anyio.fail_after(120):
                note = await c.tasks.terminal(created.task_id)
        assert note["status"] == "completed"
        assert note["result"]["isError"] is False
        assert note["result"]["structuredContent"]["counts"] == {"completed": 2}
        assert c.sent == {"tools/call:submit_group": 1, "subscriptions/listen": 1}


async def test_move_data_is_a_task_that_ends_on_the_stream(tmp_path: Path) -> None:
    """A transfer's outcome, succeeded or failed, ends its task: `completed`, the failure as
    the tool's error (`isError`), never the JSON-RPC `failed`."""
    fed, home = tmp_path / "devfed", tmp_path / "h"
    (fed / "devanvil" / "storage" / "run").mkdir(parents=True)
    (fed / "devanvil" / "storage" / "run" / "in.dat").write_text("twelve bytes")
    (fed / "devvista" / "storage").mkdir(parents=True)
    env = {"FEDHPC_DEVFED": "process", "FEDHPC_DEVFED_DIR": str(fed)}
    async with daemon(home, env), tasks_client(stdio_params(home, "--no-autostart", **env)) as c:
        ids = []
        for name in ("in.dat", "missing.dat"):
            move = {
                "source": f"devanvil:scratch/run/{name}",
                "destination": f"devvista:scratch/{name}",
            }
            created = await c.call("move_data", move)
            assert isinstance(created, CreatedTask), created
            assert created.task_id.startswith("x.")
            ids.append(created.task_id)
        async with c.listen(*ids):
            with anyio.fail_after(120):
                good, bad = [await c.tasks.terminal(i) for i in ids]
        assert (good["status"], good["result"]["isError"]) == ("completed", False)
        assert good["result"]["structuredContent"]["state"] == "succeeded"
        assert (bad["status"], bad["result"]["isError"]) == ("completed", True)
        assert bad["result"]["structuredContent"]["state"] == "failed"
        assert c.sent["tasks/get"] == 0
    assert (fed / "devvista" / "storage" / "in.dat").read_text() == "twelve bytes"


def _event_reads(health: dict[str, Any]) -> int:
    by_route = health.get("requests", {}).get("by_route", {})
    return int(by_route.get("GET /v1/events", {}).get("n", 0))


async def test_an_open_stream_long_polls_the_event_log(tmp_path: Path, env: dict[str, str]) -> None:
    """While a stream waits, the server asks the daemon's log once per batch of events that
    land (a long poll answered when they do), never on a timer: over a job's whole run the
    reads are at most the events written meanwhile, plus the one waiting at each end."""
    home = tmp_path / "h"
    async with (
        daemon(home, env) as rest,
        tasks_client(stdio_params(home, "--no-autostart", **env)) as c,
    ):
        created = _created(
            await c.call("submit_task", {"command": ["sleep", "4"], "envelope": CPU})
        )
        async with c.listen(created.task_id):
            before = await rest.health()
            with anyio.fail_after(120):
                await c.tasks.terminal(created.task_id)
            after = await rest.health()
    landed = int(after["last_event_seq"]) - int(before["last_event_seq"])
    reads = _event_reads(after) - _event_reads(before)
    assert 1 <= reads <= landed + 2, (reads, landed)  # a 0.5 s poll read ~10 times here
