"""What the daemon keeps or reads per finished task stays bounded through a sweep (issue 16,
daemon peak RSS): each test counts objects or rows, never bytes or time."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from fedhpc.adapters.command import CommandResult
from fedhpc.adapters.dialects import slurm_parse
from fedhpc.adapters.dialects.slurm import SlurmDialect
from fedhpc.domain.job import AccountingRecord, Shape
from fedhpc.orchestrator import records
from fedhpc.orchestrator.claims import ENDED_MARGIN_S, Ended
from fedhpc.orchestrator.estimates import _observation, usable
from fedhpc.orchestrator.records import AttemptRecord, is_own_job, job_name
from fedhpc.placement import Settings, WaitHistory, WaitObservation
from fedhpc.store import Store, WaitSample
from tests.unit.attempts import put_completed
from tests.unit.test_holdback import LIMITED
from tests.unit.test_placement_world import NOW, state
from tests.unit.test_submit_accept import Clock, _orchestrator

EPOCH = int(NOW.timestamp())


def _sacct_line(job: int, name: str, start: int = EPOCH) -> str:
    return (
        f"{job}|COMPLETED|proj|cpu|{start - 60}|{start - 60}|{start}|{start + 5}|5|0:0|"
        f"billing=1,cpu=1,mem=1G,node=1|{name}"
    )


def test_a_group_childs_jobs_are_fedhpcs_own_and_never_the_users_other_jobs() -> None:
    # A sweep's children (t<hex>-<index>) once counted as the user's other jobs: every job of
    # a 5,000-task sweep was kept in memory a second time, for the learned window (14 days).
    for task_id in ("t3b312cd7839", "t3b312cd7839-0000", "t3b312cd7839-4999"):
        assert is_own_job(job_name(task_id, 1))
        line = _sacct_line(7, job_name(task_id, 2))
        (rec,) = slurm_parse.parse_sacct(CommandResult(0, line + "\n", ""))
        assert _observation("s", rec) is None
    for other in ("train-7", "fedhpc-x1-1", "fedhpc-t3b312cd7839", None, "fedhpc-t3b-01-1-1"):
        assert not is_own_job(other)
    (mine,) = slurm_parse.parse_sacct(CommandResult(0, _sacct_line(8, "train") + "\n", ""))
    assert _observation("s", mine) is not None


def test_the_users_jobs_are_read_one_record_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[int] = []

    class Counted(AccountingRecord):
        def __init__(self, **data: Any) -> None:
            super().__init__(**data)
            made.append(1)

    monkeypatch.setattr(slurm_parse, "AccountingRecord", Counted)
    out = "".join(_sacct_line(i, f"job{i}") + "\n" for i in range(1, 1001))
    rows = SlurmDialect().iter_user_jobs(out.splitlines())
    first = next(iter(rows))
    assert first.job_id == "1" and len(made) == 1  # not 1,000 records before the first
    assert sum(1 for _ in rows) == 999 and len(made) == 1000


def _obs(partition: str, gpus: int, minutes_ago: int, wait_s: float) -> WaitObservation:
    return WaitObservation(
        site="s",
        partition=partition,
        gpus=gpus,
        wait_s=wait_s,
        observed_at=NOW - timedelta(minutes=minutes_ago),
    )


def test_only_the_observations_an_index_can_read_are_kept() -> None:
    cap = Settings().learned_max_samples
    # Three caps of recent 1-GPU jobs, older 4-GPU ones (their bucket still needs them, though
    # the partition's newest cap are all 1-GPU), and a second partition.
    obs = [_obs("g", 1, m, float(m)) for m in range(3 * cap)]
    obs += [_obs("g", 4, 10_000 + m, 500.0 + m) for m in range(cap + 50)]
    obs += [_obs("h", 1, m, 7.0) for m in range(5)]
    kept = usable(iter(obs), cap)
    assert len(kept) == cap + cap + 5  # g's 1-GPU bucket, its 4-GPU bucket, all of h
    full = WaitHistory(obs, now=NOW, settings=Settings())
    small = WaitHistory(kept, now=NOW, settings=Settings())
    for partition, gpus in (("g", 1), ("g", 2), ("g", 4), ("g", 8), ("h", 1), ("h", 2)):
        shape = Shape(gpus=gpus)
        assert small.estimate("s", partition, shape) == full.estimate("s", partition, shape)


async def test_a_cycle_reads_its_wait_samples_once_without_the_attempts_bodies(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(1, 13):
        await put_completed(store, n, now=NOW)
    newest = await store.wait_samples(limit=5)
    assert sorted(s.wait_s or 0 for s in newest) == [38.0, 39.0, 40.0, 41.0, 42.0]
    assert newest[0] == WaitSample(
        site="s",
        partition="gpu",
        gpus=1,
        cpus=2,
        nodes=1,
        wait_s=newest[0].wait_s,
        started_at=newest[0].started_at,
        ended_at=newest[0].ended_at,
        predicted_waits={"paper": 10.0},
    )
    o = _orchestrator(store, Clock())
    reads: list[int] = []
    real = store.wait_samples

    async def counted(limit: int = 2000) -> list[WaitSample]:
        reads.append(limit)
        return await real(limit)

    monkeypatch.setattr(store, "wait_samples", counted)

    def no_bodies(*_: object, **__: object) -> AttemptRecord:
        raise AssertionError("an attempt's body was read to build the wait history")

    monkeypatch.setattr(records.AttemptRecord, "from_row", no_bodies)
    monkeypatch.setattr(records.AttemptRecord, "model_validate", no_bodies)
    history, errors = await o.waits.history(), await o.waits.errors()
    assert history is not None and errors is not None
    est = history.estimate("s", "gpu", Shape(gpus=1, cpus=2))
    assert est is not None and est.source.endswith("(n=12)")
    assert reads == [2000]  # one read for both, this cycle
    o.waits.new_cycle()
    await o.waits.history()
    await o.waits.errors()
    assert reads == [2000, 2000]


async def test_ended_jobs_are_forgotten_once_a_probe_shows_them_with_nothing_queued(
    store: Store,
) -> None:
    o = _orchestrator(store, Clock(), alpha=LIMITED)
    probe = state(LIMITED.profile)
    o.collector.latest["alpha"] = probe
    after = probe.collected_at + timedelta(seconds=ENDED_MARGIN_S + 1)
    for i in range(1000):  # each control cycle's ends, and no placement builds a ledger
        o.claims.end(Ended("alpha", "cpu", after + timedelta(seconds=i)))
        if i % 100 == 99:  # a new probe every 100 ends
            probe = probe.model_copy(update={"collected_at": after + timedelta(seconds=i + 1)})
            o.collector.latest["alpha"] = probe
    assert len(o.claims.ended) <= 100
