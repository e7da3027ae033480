"""A daemon that dies between starting a resume and recording its pid: the next bridge waits
for that resume instead of starting a second one (a private store; no Slurm federation)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio

from fedhpc.bridge.delivery import Delivery
from fedhpc.bridge.service import Bridge
from fedhpc.ops.continuations import ContinuationSpec, Runtime
from fedhpc.store import Store


async def test_a_resume_whose_pid_was_not_recorded_is_waited_for_never_launched_twice(
    tmp_path: Path,
) -> None:
    log = tmp_path / "agent.log"
    spec = ContinuationSpec(
        runtime=Runtime.COMMAND,
        command=("bash", "-c", 'sleep 2; cat >> "$1"; echo >> "$1"', "agent", str(log)),
    )
    home = tmp_path / "h"
    store = await Store.open(home / "fedhpc.db")
    try:
        async with store.transaction() as tx:
            at = datetime.now(UTC)
            await tx.put_continuation(
                "ct", subject="t1", runtime="command", body=spec.model_dump(mode="json"), at=at
            )
            await tx.append_event(
                "task.terminal", "t1", {"task_id": "t1", "state": "completed"}, at=at
            )
        await Bridge(store, home).cycle()  # routes and launches
        (folder,) = (home / "deliveries").iterdir()
        pid = folder / "pid"
        assert pid.read_text().strip().isdigit()  # the launching shell wrote it
        pid.unlink()  # as if the daemon died before the pid was recorded
        restarted = Bridge(store, home)
        with anyio.fail_after(30):
            while not all(d["state"] == "delivered" for d in await store.deliveries()):
                await restarted.cycle()
                await anyio.sleep(0.2)
        await anyio.sleep(2.5)  # a second resume, had one started, would have written by now
        (line,) = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
        assert line["task_id"] == "t1"
        assert len(list((home / "deliveries").iterdir())) == 1
    finally:
        await store.close()


async def test_a_launch_that_never_recorded_a_pid_is_a_failed_attempt_after_the_timeout(
    tmp_path: Path,
) -> None:
    spec = ContinuationSpec(runtime=Runtime.COMMAND, command=("true",))
    home = tmp_path / "h"
    store = await Store.open(home / "fedhpc.db")
    try:
        async with store.transaction() as tx:
            at = datetime.now(UTC)
            await tx.put_continuation(
                "ct", subject="t1", runtime="command", body=spec.model_dump(mode="json"), at=at
            )
            await tx.append_event(
                "task.terminal", "t1", {"task_id": "t1", "state": "completed"}, at=at
            )
        bridge = Bridge(store, home)
        await bridge.route()
        (row,) = await store.deliveries()
        folder = home / "deliveries" / "r1-dead00"
        folder.mkdir(parents=True)  # the launch got this far; its shell never ran
        d = Delivery.from_row(row)
        d.body.resume, d.body.launched = "r1-dead00", True
        await bridge._save_all([d], "started")
        await bridge.deliver()
        assert [x["state"] for x in await store.deliveries()] == ["started"]  # may still run
        later = Bridge(store, home, clock=lambda: datetime.now(UTC) + timedelta(minutes=5))
        await later.deliver()
        (again,) = await store.deliveries()
        assert again["state"] == "pending" and again["attempts"] == 1
        assert "no pid recorded" in again["body"]["last_error"]
    finally:
        await store.close()


async def _one_resume(store: Store, log: Path, *, sleep_s: float = 2) -> None:
    spec = ContinuationSpec(
        runtime=Runtime.COMMAND,
        command=("bash", "-c", f'sleep {sleep_s}; cat >> "$1"; echo >> "$1"', "agent", str(log)),
    )
    async with store.transaction() as tx:
        at = datetime.now(UTC)
        await tx.put_continuation(
            "ct", subject="t1", runtime="command", body=spec.model_dump(mode="json"), at=at
        )
        await tx.append_event("task.terminal", "t1", {"task_id": "t1", "state": "completed"}, at=at)


async def test_a_daemon_taking_over_settles_the_resume_in_the_folder_it_ran_in(
    tmp_path: Path,
) -> None:
    """On a shared store the next leader has a home of its own: a resume the killed leader
    started is settled where it runs (recorded at launch), never launched a second time."""
    log = tmp_path / "agent.log"
    store = await Store.open(tmp_path / "fedhpc.db")
    try:
        await _one_resume(store, log)
        await Bridge(store, tmp_path / "a").cycle()  # the first leader launches, then dies
        other = Bridge(store, tmp_path / "b")
        with anyio.fail_after(30):
            while not all(d["state"] == "delivered" for d in await store.deliveries()):
                await other.cycle()
                await anyio.sleep(0.2)
        (line,) = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
        assert line["task_id"] == "t1"
        assert not (tmp_path / "b" / "deliveries").exists()  # nothing launched from b
    finally:
        await store.close()


async def test_a_resume_started_on_another_host_is_a_failed_try_not_a_second_resume(
    tmp_path: Path,
) -> None:
    log = tmp_path / "agent.log"
    store = await Store.open(tmp_path / "fedhpc.db")
    try:
        await _one_resume(store, log, sleep_s=0)
        bridge = Bridge(store, tmp_path / "a", backoff_s=3600)
        await bridge.cycle()
        (row,) = await store.deliveries()
        d = Delivery.from_row(row)
        assert d.state == "started" and d.body.folder and d.body.host
        d.body.host = "another-host.example"  # as if that daemon ran elsewhere
        async with store.transaction() as tx:
            at = datetime.now(UTC)
            await tx.put_delivery(
                d.id,
                event_id=d.event_id,
                continuation_id=d.continuation_id,
                state="started",
                attempts=d.attempts,
                next_at=at,
                body=d.body.dump(),
                at=at,
            )
        await bridge.cycle()
        (row,) = await store.deliveries()
        assert row["state"] == "pending" and row["attempts"] == 1  # retried later, not now
        assert "another-host.example" in row["body"]["last_error"]
        assert len(list((tmp_path / "a" / "deliveries").iterdir())) == 1  # one launch only
    finally:
        await store.close()
