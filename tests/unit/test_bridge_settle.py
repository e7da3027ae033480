"""How the bridge settles a started resume, with the interleavings pinned: a real resume
process, held by a gate file, ends exactly where the test says (no sleeps as synchronization);
and how a stopped resume ends: every process of its group, before any next try."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest

from fedhpc.bridge import settle
from fedhpc.bridge.group import group_alive, group_members
from fedhpc.bridge.service import Bridge
from fedhpc.domain.config import ResumeConfig, ResumeRuntime
from fedhpc.ops.continuations import ContinuationSpec, Runtime
from fedhpc.store import Store


def _wait_ended(pid: int, timeout_s: float = 60.0) -> None:
    """Block until process `pid` (not our child) has ended: its pidfd turns readable."""
    fd = os.pidfd_open(pid)
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        assert poller.poll(int(timeout_s * 1000)), f"the resume {pid} did not end"
    finally:
        os.close(fd)


async def test_a_resume_that_writes_its_status_and_ends_between_the_two_looks_is_delivered(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race of ab0e7ef: the bridge reads the status file (none yet), the resume then writes
    it and ends, and the bridge finds the process gone. The resume completed: it is
    delivered on its status, never failed as 'ended without a status' (and retried)."""
    gate = tmp_path / "gate"
    spec = ContinuationSpec(
        runtime=Runtime.COMMAND,
        command=("bash", "-c", 'until [ -e "$1" ]; do sleep 0.02; done', "agent", str(gate)),
    )
    home = tmp_path / "h"
    at = datetime.now(UTC)
    async with store.transaction() as tx:
        await tx.put_continuation(
            "ct", subject="t1", runtime="command", body=spec.model_dump(mode="json"), at=at
        )
        await tx.append_event("task.terminal", "t1", {"task_id": "t1", "state": "completed"}, at=at)
    bridge = Bridge(store, home)
    await bridge.cycle()  # routes and launches: the resume now waits at its gate
    (d,) = await store.deliveries()
    assert d["state"] == "started"
    (folder,) = (home / "deliveries").iterdir()

    looks: list[tuple[int, bool]] = []

    def status_lands_then_look(pid: int) -> bool:
        """Between the bridge's status read and its process look: open the gate, let the
        resume write its status and end, then look at the process for real."""
        looks.append((pid, (folder / "rc").exists()))
        gate.touch()
        _wait_ended(pid)
        return group_alive(pid)

    monkeypatch.setattr(settle, "group_alive", status_lands_then_look)
    await bridge.deliver()

    pid = int((folder / "pid").read_text())
    assert looks == [(pid, False)]  # one look, made while the status file was still absent
    assert (folder / "rc").read_text().strip() == "0"
    (d,) = await store.deliveries()
    assert d["state"] == "delivered", d["body"].get("last_error")
    assert d["attempts"] == 0 and "last_error" not in d["body"]


# A CLI that ignores SIGTERM and forks a child that inherits that, then never answers: what a
# stuck model endpoint leaves when the CLI does not exit on SIGTERM. Each try logs its pids.
STUBBORN = """#!/bin/bash
trap '' TERM
sleep 300 &
echo "$$ $!" >> "$STANDIN_LOG"
while :; do sleep 1; done
"""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


async def test_a_stopped_resume_ends_its_whole_group_before_the_next_try(
    store: Store, tmp_path: Path
) -> None:
    """Stopped at its start timeout, the resume's CLI ignores SIGTERM and has forked a child:
    the delivery stays `started` until SIGKILL of the group has ended every process of the
    try; only then is it retried, and no process of the first try lives when the second
    starts (GNU `timeout` without --foreground used to keep itself and the CLI in a group of
    their own, out of reach of the group kill: two turns on one session)."""
    cli = tmp_path / "codex"
    cli.write_text(STUBBORN)
    cli.chmod(0o755)
    tries = tmp_path / "tries.log"
    cfg = ResumeRuntime(binary=str(cli), env={"STANDIN_LOG": str(tries)})
    spec = ContinuationSpec(runtime=Runtime.CODEX, session_id="th-1", cwd=str(tmp_path))
    home = tmp_path / "h"
    at = datetime.now(UTC)
    async with store.transaction() as tx:
        await tx.put_continuation(
            "ct", subject="t1", runtime="codex", body=spec.model_dump(mode="json"), at=at
        )
        await tx.append_event("task.terminal", "t1", {"task_id": "t1", "state": "completed"}, at=at)
    bridge = Bridge(
        store,
        home,
        start_timeout_s=0.5,
        kill_grace_s=0.5,
        backoff_s=0.05,
        resume=lambda: ResumeConfig(codex=cfg),
    )
    groups: list[int] = []
    try:
        with anyio.fail_after(60):
            while len(lines := tries.read_text().splitlines() if tries.exists() else []) < 2:
                await bridge.cycle()
                groups = [int(f.read_text()) for f in home.glob("deliveries/*/pid")]
                (d,) = await store.deliveries()
                if d["attempts"] == 0 and lines:  # the first try is still being ended
                    assert d["state"] == "started"
                await anyio.sleep(0.05)
        first = [int(x) for x in lines[0].split()]
        assert [p for p in first if _alive(p)] == []  # the CLI and its child: gone
        (d,) = await store.deliveries()
        assert d["attempts"] == 1 and d["state"] == "started"
        assert "no answer from the model within 0.5 s" in d["body"]["last_error"]
        (old,) = [f for f in home.glob("deliveries/*") if (f / "term").exists()]
        assert group_members(int((old / "pid").read_text())) == []
    finally:
        for pgid in groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)


def test_a_wrapper_not_yet_leading_its_own_group_is_still_launching(tmp_path: Path) -> None:
    """Between the launch's fork and the wrapper's `setsid`, its pid leads no group yet: the
    resume is running (a look there once took it for one that ended without a status, and a
    second resume ran the same event)."""
    spec = ContinuationSpec(runtime=Runtime.COMMAND, command=("true",))
    folder = tmp_path / "r1"
    folder.mkdir()
    child = subprocess.Popen(["sleep", "60"])  # in this process's group, as before setsid
    try:
        (folder / "pid").write_text(f"{child.pid}\n")
        assert not group_alive(child.pid)
        now = datetime.now(UTC).timestamp()
        look = settle.standing(spec, folder, now=now, start_timeout_s=30)
        assert look.stand is settle.Stand.RUNNING
    finally:
        child.kill()
        child.wait()
    look = settle.standing(spec, folder, now=now, start_timeout_s=30)
    assert look.stand is settle.Stand.FAILED and "without a status" in look.reason
