"""Submissions answered as soon as they are durably accepted, through the real MCP client on
the local Slurm federation: a 1,000-child group, a submit that arrives before the first probe,
a daemon too slow to answer (accepted, outcome unknown), and retries versus new work."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_types import CallToolResult

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.ops.continuations import ContinuationSpec, Runtime
from fedhpc.ops.task_views import GroupView, TaskHandle
from fedhpc.ops.tasks import ResultRequest
from fedhpc.orchestrator.groups import group_id_for
from fedhpc.settings.daemon import DaemonSettings
from tests.integration.daemon_util import running, settled, wait_terminal
from tests.integration.mcp_support import kill_daemon_of, stdio_params

pytestmark = pytest.mark.devfed

SMALL = {"cpus": {"min": 1, "max": 1}, "wall_time": {"min": "5m"}}
# A group answer is made on acceptance, not after placement: by then the placer (at most 2
# scheduler submissions in flight per site) has sent few children, if any. A timing bound
# would fail on a loaded machine; the answer's own counts say when it was made.
DISPATCHED_AT_ANSWER_MAX = 100


def _ok(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    body: dict[str, Any] = result.structured_content  # a tool's structured answer: an object
    return body


def _error(result: CallToolResult) -> dict[str, Any]:
    assert result.is_error, result
    body: dict[str, Any] = json.loads(result.content[0].text)  # type: ignore[union-attr]
    return body


def _resume_into(log: Path) -> ContinuationSpec:
    script = 'cat >> "$1"; echo >> "$1"'
    return ContinuationSpec(
        runtime=Runtime.COMMAND, command=("bash", "-c", script, "agent", str(log))
    )


def _db(home: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(f"file:{home / 'fedhpc.db'}?mode=ro", uri=True)) as db:
        return db.execute(sql, args).fetchall()


# A thousand children run to the end: 54-113 s in seven runs.
@pytest.mark.budget(90)
async def test_a_1000_child_group_is_answered_at_once_and_every_child_completes(
    devfed: Any, tmp_path: Path
) -> None:
    home, log = tmp_path / "h", tmp_path / "agent.log"
    children = [{"command": ["true"], "name": f"c{i}"} for i in range(1000)]
    # A thousand sbatch calls load the shared controllers, beside the other workers' tests on
    # two cores: a ping may wait past the 5 s default twice, and the site would go offline
    # (`site.offline` and its children moved, not what this test is about). A slow controller
    # is the subject of test_controller_loss; here it is given room.
    slack = {"FEDHPC_PING_TIMEOUT_S": "20", "FEDHPC_PROBE_TIMEOUT_S": "60"}
    async with running(home, **slack) as daemon:
        params = stdio_params(
            home, "--no-autostart", FEDHPC_CONTINUATION=_resume_into(log).model_dump_json()
        )
        async with Client(params, mode="legacy") as client:
            await client.list_tools()  # the server is up: measure the call alone
            started = time.monotonic()
            result = await client.call_tool(
                "submit_group",
                {
                    "objective": "a thousand short children",
                    "children": children,
                    "envelope": SMALL,
                },
            )
            elapsed = time.monotonic() - started
        view = GroupView.model_validate(_ok(result))
        dispatched = view.size - view.counts.get("queued", 0)
        print(
            f"\nsubmit_group with 1000 children answered in {elapsed:.3f} s, "
            f"{dispatched} of them dispatched by then"
        )
        assert view.size == 1000
        # answered at once: before the placer had sent the children (not after placement)
        assert view.state == "placing", view.counts
        assert dispatched <= DISPATCHED_AT_ANSWER_MAX, view.counts
        prefix = "t" + view.group_id[1:]
        assert view.child_ids == f"{prefix}-000 … {prefix}-999"
        assert len(view.children) + view.omitted == 1000
        assert len(result.content[0].text) < 8192  # type: ignore[union-attr]
        with anyio.fail_after(600):
            while (now := await daemon.group(view.group_id)).state in ("placing", "running"):
                await anyio.sleep(0.5)
        assert now.counts == {"completed": 1000}
        assert sum(now.sites.values()) == 1000
        with anyio.fail_after(60):
            while not log.exists() or not log.read_text().strip():
                await anyio.sleep(0.5)
        # Two more whole cycles, every event routed, no resume pending: still one resume.
        await settled(daemon, cycles=2)
        lines = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
        assert [(x["event"], x.get("group_id") or x.get("subject")) for x in lines] == [
            ("group.round_terminal", view.group_id)
        ]
        kinds = [e["kind"] for e in await daemon.events(limit=1000)]
        assert kinds == ["group.round_terminal"]


async def test_a_submit_right_after_the_server_starts_the_daemon_waits_for_data(
    devfed: Any, tmp_path: Path
) -> None:
    """`fedhpc serve` starts the daemon and the agent's first call is submit_task: the task is
    queued until the first probe, never `unschedulable` for lack of data."""
    home = tmp_path / "fresh"
    try:
        async with Client(stdio_params(home), mode="legacy") as client:
            with anyio.fail_after(60):
                args = {"command": ["bash", "-c", "echo early"], "envelope": SMALL}
                answer = TaskHandle.model_validate(_ok(await client.call_tool("submit_task", args)))
        assert answer.state.value in ("queued", "submitted"), answer
        if answer.state.value == "queued":
            assert answer.decision.startswith("queued:")
        async with DaemonClient(DaemonSettings.from_env(home=home)) as daemon:
            done = await wait_terminal(daemon, answer.task_id)
        assert done.state.value == "completed", done.reasons
    finally:
        kill_daemon_of(home)


async def test_a_daemon_too_slow_to_answer_gives_accepted_unknown_and_the_key_retries_safely(
    devfed: Any, tmp_path: Path
) -> None:
    home = tmp_path / "h"
    seeds = [{"command": ["true"], "name": "s1"}, {"command": ["true"], "name": "s2"}]
    args = {"objective": "two seeds", "envelope": SMALL, "children": seeds}
    async with running(home) as daemon:
        pid = int((home / "daemon.lock").read_text().split()[0])
        params = stdio_params(home, "--no-autostart", FEDHPC_CLIENT_TIMEOUT_SCALE="0.05")
        async with Client(params, mode="legacy") as client:
            os.kill(pid, signal.SIGSTOP)  # the daemon holds the request and answers nothing
            try:
                with anyio.fail_after(30):
                    lost = _error(await client.call_tool("submit_group", args))
            finally:
                os.kill(pid, signal.SIGCONT)
            assert lost["code"] == "accepted_unknown", lost
            key = lost["idempotency_key"]
            assert key in lost["hint"] and "submit_group" in lost["hint"]
            assert "internal" not in json.dumps(lost)
            await daemon.wait_until_up(10)
            first = GroupView.model_validate(
                _ok(await client.call_tool("submit_group", {**args, "idempotency_key": key}))
            )
            again = GroupView.model_validate(
                _ok(await client.call_tool("submit_group", {**args, "idempotency_key": key}))
            )
        assert first.group_id == again.group_id == group_id_for(key)
        assert again.existing is not None and first.group_id in again.existing
        assert _db(home, "SELECT count(*) FROM groups") == [(1,)]
        assert _db(home, "SELECT count(*) FROM tasks") == [(2,)]
        for child in again.children:
            done = await wait_terminal(daemon, child.task_id)
            assert done.state.value == "completed"


async def test_retries_return_the_same_task_and_new_requests_are_new_work(
    devfed: Any, tmp_path: Path
) -> None:
    home = tmp_path / "h"
    args = {"command": ["bash", "-c", "echo again"], "envelope": SMALL}
    # The window holds the retry (sent at once) with room to spare on a loaded machine, and
    # is over soon after the first task ends.
    window_s = 4.0
    async with running(home, FEDHPC_RETRY_WINDOW_S=f"{window_s:g}") as daemon:
        async with Client(stdio_params(home, "--no-autostart"), mode="legacy") as client:
            first = TaskHandle.model_validate(_ok(await client.call_tool("submit_task", args)))
            retried = TaskHandle.model_validate(_ok(await client.call_tool("submit_task", args)))
            assert retried.task_id == first.task_id  # a retry after a lost reply: same task
            assert retried.existing is not None and "retry window" in retried.existing
            done = await wait_terminal(daemon, first.task_id)
            assert done.state.value == "completed"
            assert done.created_at is not None
            age = time.time() - done.created_at.timestamp()
            await anyio.sleep(max(0.0, window_s + 0.5 - age))
            later = TaskHandle.model_validate(_ok(await client.call_tool("submit_task", args)))
            assert later.task_id != first.task_id  # the same request later: new work
            assert later.existing is None

            keyed = {**args, "idempotency_key": f"keyed-{tmp_path.name}"}
            one = TaskHandle.model_validate(_ok(await client.call_tool("submit_task", keyed)))
            await wait_terminal(daemon, one.task_id)
            two = TaskHandle.model_validate(_ok(await client.call_tool("submit_task", keyed)))
        assert two.task_id == one.task_id  # an explicit key: the same task at any age
        assert two.state.value == "completed"
        assert two.existing is not None and "the same idempotency_key" in two.existing
        assert "available now" in two.next and "End your turn" not in two.next
        result = await daemon.get_result(ResultRequest(task_id=two.task_id))
        assert len(result.attempts) == 1  # nothing ran twice
