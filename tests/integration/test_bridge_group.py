"""The resume bridge on a private store (no Slurm federation): a group whose children fail
wakes its agent once, with the round event, never once per child."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import anyio

from fedhpc.bridge.service import Bridge
from fedhpc.ops.continuations import ContinuationSpec, Runtime
from fedhpc.store import Store


async def test_a_group_whose_many_children_fail_resumes_once_with_the_round_event(
    tmp_path: Path,
) -> None:
    log = tmp_path / "agent.log"
    spec = ContinuationSpec(
        runtime=Runtime.COMMAND,
        command=("bash", "-c", 'cat >> "$1"; echo >> "$1"', "agent", str(log)),
    )
    own = ContinuationSpec(
        runtime=Runtime.COMMAND,
        command=("bash", "-c", 'cat >> "$1"; echo >> "$1"', "agent", str(tmp_path / "own.log")),
    )
    gid, n = "g0123456789ab", 1000
    at = datetime.now(UTC)
    store = await Store.open(tmp_path / "h" / "fedhpc.db")
    try:
        async with store.transaction() as tx:
            await tx.put_continuation(
                "cg", subject=gid, runtime="command", body=spec.model_dump(mode="json"), at=at
            )
            # a task of its own (not in the group) keeps its own continuation's events
            await tx.put_continuation(
                "ct", subject="tsolo", runtime="command", body=own.model_dump(mode="json"), at=at
            )
            for i in range(n):
                kind = "task.retry_exhausted" if i % 2 else "task.unschedulable"
                state = "failed" if i % 2 else "unschedulable"
                await tx.append_event(
                    kind,
                    f"t{i:04d}",
                    {
                        "task_id": f"t{i:04d}",
                        "group_id": gid,
                        "state": state,
                        "reason": "exit 1 " + "x" * 300,
                    },
                    at=at,
                )
            await tx.append_event(
                "task.retry_exhausted", "tsolo", {"task_id": "tsolo", "state": "failed"}, at=at
            )
            await tx.append_event(
                "group.round_terminal",
                gid,
                {
                    "group_id": gid,
                    "round": 1,
                    "state": "failed",
                    "counts": {"failed": n // 2, "unschedulable": n // 2},
                    "result": f"fedhpc://groups/{gid}",
                },
                at=at,
            )
        bridge = Bridge(store, tmp_path / "h", poll_s=0.1)
        with anyio.fail_after(60):
            while True:
                await bridge.cycle()
                rows = await store.deliveries(limit=5000)
                if rows and all(r["state"] == "delivered" for r in rows):
                    break
                await anyio.sleep(0.1)
        await bridge.cycle()
        assert len(rows) == 2
        (line,) = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
        assert line["event"] == "group.round_terminal"
        assert line["group_id"] == gid
        assert line["state"] == "failed"
        assert line["counts"] == {"failed": 500, "unschedulable": 500}
        (mine,) = [json.loads(x) for x in (tmp_path / "own.log").read_text().splitlines() if x]
        assert mine["task_id"] == "tsolo" and mine["event"] == "task.retry_exhausted"
    finally:
        await store.close()
