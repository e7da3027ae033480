"""How the bridge settles a started resume, with the interleavings pinned: a real resume
process, held by a gate file, ends exactly where the test says (no sleeps as synchronization)."""

from __future__ import annotations

import os
import select
from datetime import UTC, datetime
from pathlib import Path

import pytest

from fedhpc.bridge import settle
from fedhpc.bridge.runtimes import process_alive
from fedhpc.bridge.service import Bridge
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
        return process_alive(pid)

    monkeypatch.setattr(settle, "process_alive", status_lands_then_look)
    await bridge.deliver()

    pid = int((folder / "pid").read_text())
    assert looks == [(pid, False)]  # one look, made while the status file was still absent
    assert (folder / "rc").read_text().strip() == "0"
    (d,) = await store.deliveries()
    assert d["state"] == "delivered", d["body"].get("last_error")
    assert d["attempts"] == 0 and "last_error" not in d["body"]
