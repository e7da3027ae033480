"""Attempts written to the store as the daemon writes them: a task's attempt 1 on site s
(`attempt`, `put_attempt`), and the completed history the learned wait estimator and the
estimators' error record read (`put_completed`, Store.wait_samples)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from fedhpc.domain.job import JobState, Shape
from fedhpc.orchestrator.records import AttemptRecord, job_name
from fedhpc.store import Store, Tx


def attempt(
    task_id: str, *, now: datetime, state: JobState, partition: str = "p", **more: Any
) -> AttemptRecord:
    """Task `task_id`'s attempt 1 on site s, `partition` (1 CPU unless `more` says a shape),
    created at `now`, job 1 unless `more` names one; `more` sets any other field."""
    return AttemptRecord(
        **{
            "task_id": task_id,
            "n": 1,
            "site": "s",
            "partition": partition,
            "account": None,
            "qos": None,
            "shape": Shape(cpus=1),
            "job_name": job_name(task_id, 1),
            "job_id": "1",
            "created_at": now,
            "state": state,
            **more,
        }
    )


async def put_attempt(tx: Tx, att: AttemptRecord, *, at: datetime) -> None:
    """Write `att` (its row and its body) as the daemon does."""
    await tx.put_attempt(
        att.task_id,
        att.n,
        site=att.site,
        partition=att.partition,
        job_name=att.job_name,
        job_id=att.job_id,
        state=att.state.value,
        body=att.model_dump(mode="json"),
        at=at,
    )


async def put_completed(
    store: Store, n: int, *, now: datetime, wait_s: float | None = None
) -> AttemptRecord:
    """Task `t{n:04x}`'s attempt 1 on site s, partition gpu (1 GPU, 2 CPUs): ended n minutes
    before `now` after waiting `wait_s` (default 30 + n s), paper having predicted 10 s; the
    n-th written is the newest (updated n s after `now`)."""
    task_id = f"t{n:04x}"
    att = attempt(
        task_id,
        now=now,
        state=JobState.COMPLETED,
        partition="gpu",
        shape=Shape(gpus=1, cpus=2),
        job_id=str(n),
        started_at=now - timedelta(minutes=n, seconds=-30),
        ended_at=now - timedelta(minutes=n),
        wait_s=30.0 + n if wait_s is None else wait_s,
        predicted_waits={"paper": 10.0},
    )
    async with store.transaction() as tx:
        await tx.put_task(task_id, state="completed", body={}, at=now)  # only its attempt
        await put_attempt(tx, att, at=now + timedelta(seconds=n))
    return att
