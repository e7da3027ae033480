"""`fedhpc tasks`, `task ID`, `events` and `cancel ID` for people, on the daemon's REST API,
against a real daemon and the local Slurm federation."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from fedhpc.cli import tasks as tasks_cli
from fedhpc.client.daemon_client import DaemonClient
from fedhpc.domain import ResourceEnvelope
from fedhpc.ops.task_views import TaskHandle
from fedhpc.ops.tasks import SubmitTaskRequest
from fedhpc.settings.daemon import DaemonSettings
from tests.integration.daemon_util import job_id_of, start, stop, wait_terminal

pytestmark = pytest.mark.devfed


@pytest.fixture
def daemon(
    devfed: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[DaemonSettings]:
    home = tmp_path / "h"
    monkeypatch.setenv("FEDHPC_HOME", str(home))
    proc = start(home)
    settings = DaemonSettings.from_env()

    async def up() -> None:
        async with DaemonClient(settings) as client:
            await client.wait_until_up(30)
            await client.refresh()

    try:
        anyio.run(up)
        yield settings
    finally:
        stop(proc)


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    parser = argparse.ArgumentParser()
    tasks_cli.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    assert args.func(args) == 0
    return capsys.readouterr().out


def _submit(settings: DaemonSettings, script: str, wait: bool) -> TaskHandle:
    async def go() -> TaskHandle:
        async with DaemonClient(settings) as client:
            handle = await client.submit_task(
                SubmitTaskRequest(
                    command=("bash", "-c", script),
                    name="cli",
                    envelope=ResourceEnvelope.model_validate({"wall_time": {"min": "5m"}}),
                )
            )
            if wait:
                await wait_terminal(client, handle.task_id)
                # Answered on placement; the job id as the daemon recorded it afterwards.
                handle = handle.model_copy(
                    update={"job_id": await job_id_of(client, handle.task_id)}
                )
            return handle

    return anyio.run(go)


def test_tasks_task_and_events_show_a_finished_task(
    daemon: DaemonSettings, capsys: pytest.CaptureFixture[str]
) -> None:
    handle = _submit(daemon, "echo cli-visible", wait=True)
    table = _cli(capsys, "tasks")
    header, row = table.splitlines()[:2]
    assert header.split()[:3] == ["TASK", "NAME", "STATE"]
    assert row.split()[:3] == [handle.task_id, "cli", "completed"]
    listed = json.loads(_cli(capsys, "tasks", "--json"))
    assert [t["task_id"] for t in listed] == [handle.task_id]
    shown = _cli(capsys, "task", handle.task_id, "--preview", "stdout")
    assert shown.startswith(f"task {handle.task_id} (cli): completed")
    assert "cli-visible" in shown
    manifest = json.loads(_cli(capsys, "task", handle.task_id, "--json"))
    assert manifest["attempts"][0]["job_id"] == handle.job_id
    events = _cli(capsys, "events")
    assert "task.terminal" in events
    assert handle.task_id in events
    lines = _cli(capsys, "events", "--json")
    assert json.loads(lines)[0]["subject"] == handle.task_id


def test_cancel_kills_a_running_task(
    daemon: DaemonSettings, capsys: pytest.CaptureFixture[str]
) -> None:
    handle = _submit(daemon, "sleep 300", wait=False)
    out = json.loads(_cli(capsys, "cancel", handle.task_id, "--json"))
    assert out["task_id"] == handle.task_id
    assert out["state"] == "cancelled"
    assert _cli(capsys, "cancel", handle.task_id).strip() == f"task {handle.task_id}: cancelled"


def test_events_follow_prints_new_events_as_json_lines(
    daemon: DaemonSettings, capsys: pytest.CaptureFixture[str]
) -> None:
    handle = _submit(daemon, "true", wait=True)
    parser = argparse.ArgumentParser()
    tasks_cli.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["events", "--follow", "--json", "--interval", "0.2"])

    async def follow_briefly() -> None:
        with anyio.move_on_after(2):
            await tasks_cli._follow(args)

    anyio.run(follow_briefly)
    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line)["subject"] == handle.task_id
