"""The warm resume MCP server never outlives the bridge that started it: a clean `fedhpc daemon
stop`, a cancelled bridge run, and a recorded server that lives but does not answer (hung) all
end it; a resumed turn's call made while the daemon restarts waits for it. A real `fedhpc
serve --http` and, for the daemon, private process-mode sites (no Slurm federation)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from fedhpc.bridge.service import Bridge
from fedhpc.bridge.warm import DAEMON_WAIT_S, WarmServer, _free_port, alive, spawn_detached
from fedhpc.domain import ResourceEnvelope
from fedhpc.ops.continuations import ContinuationSpec, Runtime
from fedhpc.ops.tasks import SubmitTaskRequest
from fedhpc.store import Store
from tests.integration.daemon_util import running


def _pid(home: Path) -> int:
    return int(json.loads((home / "resume-mcp.json").read_text())["pid"])


async def test_a_cancelled_bridge_run_leaves_no_warm_server(tmp_path: Path) -> None:
    home = tmp_path / "h"
    store = await Store.open(home / "fedhpc.db")
    try:
        bridge = Bridge(store, home, warm_mcp=True, poll_s=0.1)
        assert bridge.warm is not None
        assert await bridge.warm.entry() is not None
        pid = _pid(home)
        assert alive(pid)
        async with anyio.create_task_group() as tg:
            tg.start_soon(bridge.run, anyio.Event())  # never set: only the cancel ends it
            await anyio.sleep(0.5)
            tg.cancel_scope.cancel()
        assert not alive(pid)
        assert not (home / "resume-mcp.json").exists()
    finally:
        await store.close()


async def test_a_hung_recorded_server_is_ended_never_a_second_beside_it(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    port = _free_port()
    # alive, named like the server, but never answering on its port (a hung server)
    hung = spawn_detached(
        [sys.executable, "-c", "import time; time.sleep(600)", "serve", "--port", str(port)],
        env={},
        cwd=str(home),
        log_path=home / "hung.log",
    )
    # until it is python (bash's fork already names `serve` in its argv, and a process read in
    # the middle of exec shows no argv: the recorded server must be the settled python)
    python = os.path.realpath(sys.executable)
    with anyio.fail_after(10):
        while os.path.realpath(f"/proc/{hung}/exe") != python:
            await anyio.sleep(0.05)
    (home / "resume-mcp.json").write_text(json.dumps({"pid": hung, "port": port, "token": "t"}))
    warm = WarmServer(home)
    assert await warm.entry() is not None
    fresh = _pid(home)
    assert fresh != hung and alive(fresh)
    assert not alive(hung)
    # stop() ends the recorded one even when it ignores SIGTERM (stopped: SIGKILL after 3 s)
    os.kill(fresh, signal.SIGSTOP)
    await warm.stop()
    assert not alive(fresh)


async def test_fedhpc_daemon_stop_leaves_no_warm_server(tmp_path: Path) -> None:
    home = tmp_path / "h"
    env = {
        "FEDHPC_DEVFED": "process",
        "FEDHPC_DEVFED_DIR": str(tmp_path / "devfed"),
        "FEDHPC_RESUME_WARM_MCP": "1",
        "FEDHPC_CLAUDE_BIN": str(tmp_path / "no-claude"),
    }
    spec = ContinuationSpec(runtime=Runtime.CLAUDE_CODE, session_id="s1", cwd=str(tmp_path))
    envelope = ResourceEnvelope.model_validate({"wall_time": {"min": "5m"}})
    async with running(home, **env) as client:
        await client.submit_task(
            SubmitTaskRequest(command=("true",), envelope=envelope, continuation=spec)
        )
        with anyio.fail_after(90):  # the resume starts the warm server before its CLI
            while not (home / "resume-mcp.json").exists():
                await anyio.sleep(0.3)
        pid = _pid(home)
        assert alive(pid)
        done = subprocess.run(
            [sys.executable, "-m", "fedhpc.cli.main", "daemon", "stop"],
            env={"FEDHPC_HOME": str(home), "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert not alive(pid)


async def test_a_call_made_while_the_daemon_restarts_waits_for_it(tmp_path: Path) -> None:
    """The warm server outlives a daemon crash; the resumed turn's `get_result` then came
    while the restarted daemon was coming up (2.5 s seen) and was answered daemon_unavailable
    at once: the turn went on without its result. It now waits (up to 30 s) for the daemon,
    starting none itself."""
    home = tmp_path / "h"
    home.mkdir()
    warm = WarmServer(home)
    entry = await warm.entry()  # as a crashed daemon leaves it: up, no daemon behind it
    assert entry is not None and DAEMON_WAIT_S >= 30
    authed = httpx2.AsyncClient(headers=entry["headers"], timeout=60)
    env = {"FEDHPC_DEVFED": "process", "FEDHPC_DEVFED_DIR": str(tmp_path / "df")}
    try:
        async with (
            authed,
            Client(streamable_http_client(entry["url"], http_client=authed), mode="legacy") as c,
        ):
            answer: list[object] = []

            async def call() -> None:
                answer.append(await c.call_tool("list_events", {}))

            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                await anyio.sleep(2.5)  # the daemon restarting
                assert answer == []  # still waiting, not answered daemon_unavailable
                async with running(home, **env):
                    with anyio.fail_after(DAEMON_WAIT_S):
                        while not answer:
                            await anyio.sleep(0.1)
            (result,) = answer
            assert not getattr(result, "is_error", True), getattr(result, "content", result)
    finally:
        await warm.stop()
