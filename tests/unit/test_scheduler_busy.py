"""A scheduler shedding load ("Socket timed out", "Resource temporarily unavailable", ...) is
a typed, transient `SchedulerBusy` in every dialect, never a refusal or a lost site; the
collector keeps the site's last view and backs off, up to a limit."""

from __future__ import annotations

from typing import Any, cast

import pytest

from fedhpc.adapters.command import BATCH_MARK, BatchSection, CommandResult
from fedhpc.adapters.dialects import SchedulerRejected, get_dialect
from fedhpc.adapters.dialects.busy import BUSY_PATTERNS, SchedulerBusy
from fedhpc.adapters.transports.base import TransportError
from fedhpc.collector import Collector
from fedhpc.collector.service import BUSY_LIMIT
from fedhpc.domain.site import Health, SiteState
from fedhpc.store import Store
from tests.unit.test_placement_world import cpu_partition, profile, site, state

BUSY = {
    "slurm": [
        "sbatch: error: Batch job submission failed: Resource temporarily unavailable",
        "squeue: error: slurm_load_jobs error: Socket timed out on send/recv operation",
        "sbatch: error: Slurm temporarily unable to accept job, sleeping and retrying",
        "sacct: error: RPC rate limit exceeded, try again",
    ],
    "pbs": [
        "qsub: Resources temporarily unavailable",
        "qstat: Server is busy, try again later",
    ],
    "lsf": [
        "LSF is processing your request. Please wait ...",
        "Batch system daemon not responding ... still trying",
    ],
    "process": ["localsched: error: Resource temporarily unavailable"],
}
NOT_BUSY = {
    "slurm": [
        "squeue: error: slurm_load_jobs error: "
        "Unable to contact slurm controller (connect failure)",
        "sbatch: error: Batch job submission failed: Invalid account or account/partition",
    ],
    "pbs": ["qsub: Unknown queue", "Connection refused\nqsub: cannot connect to server pbs01"],
    "lsf": ["Queue does not exist. Job not submitted."],
    "process": ["localsched: error: invalid account"],
}
CASES = [(d, text) for d, texts in BUSY.items() for text in texts]


@pytest.mark.parametrize(("dialect", "text"), CASES)
def test_every_dialect_reads_its_schedulers_busy_answers_as_scheduler_busy(
    dialect: str, text: str
) -> None:
    d = get_dialect(dialect)
    failed = CommandResult(1, "", text)
    for parse in (d.parse_submit, d.parse_status, d.parse_accounting):
        with pytest.raises(SchedulerBusy) as info:
            parse(failed)
        assert isinstance(info.value, TransportError)  # dispatch: outcome unknown, look up
        assert info.value.code == "scheduler_busy" and text.splitlines()[-1] in info.value.message


@pytest.mark.parametrize(
    ("dialect", "text"), [(d, t) for d, texts in NOT_BUSY.items() for t in texts]
)
def test_a_refusal_or_a_dead_controller_is_not_busy(dialect: str, text: str) -> None:
    d = get_dialect(dialect)
    with pytest.raises(SchedulerRejected) as info:
        d.parse_submit(CommandResult(1, "", text))
    assert not isinstance(info.value, SchedulerBusy)
    assert not BUSY_PATTERNS[dialect].search(text)


def test_a_busy_answer_that_succeeded_is_read_as_usual() -> None:
    d = get_dialect("slurm")
    warned = CommandResult(0, "4242\n", "sbatch: error: Slurm temporarily unable to accept job")
    assert d.parse_submit(warned) == "4242"


def test_a_probe_whose_core_sections_are_busy_raises_and_a_dead_one_is_offline() -> None:
    d = get_dialect("slurm")
    p = profile("busy", cpu_partition("p"))
    busy = "slurm_load_node error: Socket timed out on send/recv operation"
    sections = {
        n: BatchSection(name=n, returncode=1, stdout=busy) for n in ("queue", "sinfo", "nodes")
    }
    with pytest.raises(SchedulerBusy):
        d.parse_probe(sections, p, "alice", state(p).collected_at)
    dead = "Unable to contact slurm controller (connect failure)"
    sections["nodes"] = BatchSection(name="nodes", returncode=1, stdout=dead)
    got = d.parse_probe(sections, p, "alice", state(p).collected_at)
    assert got.health is Health.OFFLINE


class _Busy:
    """A site adapter whose probe the scheduler refuses `refusals` times, then answers."""

    def __init__(self, answer: SiteState, refusals: int) -> None:
        self.answer, self.refusals, self.calls = answer, refusals, 0

    async def probe(self, *, timeout_s: float = 30.0) -> SiteState:
        self.calls += 1
        if self.calls <= self.refusals:
            raise SchedulerBusy("probe: the slurm scheduler is busy: Socket timed out")
        return self.answer


async def test_the_collector_keeps_a_busy_sites_view_and_backs_off(store: Store) -> None:
    s = site(profile("busy", cpu_partition("p"), min_refresh_s=1))
    live = state(s.profile)
    adapter = _Busy(live, refusals=0)
    collector = Collector({"busy": s}, {"busy": cast(Any, adapter)}, store, refresh_s=1)
    await collector.refresh(force=True)
    assert adapter.calls == 1 and collector.latest["busy"].health is Health.OK
    adapter.calls, adapter.refusals = 0, BUSY_LIMIT
    intervals = []
    for _ in range(BUSY_LIMIT):
        await collector.refresh(force=True)
        kept = collector.latest["busy"]
        assert kept.health is Health.DEGRADED and "busy" in (kept.error or "")
        assert kept.partitions == live.partitions  # the last view, not an empty one
        intervals.append(collector._due["busy"] - collector._probed["busy"])
        collector.probe_soon("busy")  # the control cycle's nudge does not cut the back-off
        assert collector._due["busy"] - collector._probed["busy"] == intervals[-1]
    assert intervals == sorted(intervals) and intervals[-1] > intervals[0]
    await collector.refresh(force=True)  # it answers again: back to normal
    assert collector.latest["busy"].health is Health.OK and collector._busy["busy"] == 0


async def test_a_site_busy_past_the_limit_is_judged_as_a_failed_probe(store: Store) -> None:
    s = site(profile("busy", cpu_partition("p"), min_refresh_s=1))
    adapter = _Busy(state(s.profile), refusals=0)
    collector = Collector({"busy": s}, {"busy": cast(Any, adapter)}, store, refresh_s=1)
    await collector.refresh(force=True)
    adapter.refusals = adapter.calls + BUSY_LIMIT + 1
    for _ in range(BUSY_LIMIT):
        await collector.refresh(force=True)
        assert collector.latest["busy"].health is Health.DEGRADED
    await collector.refresh(force=True)
    assert collector.latest["busy"].health is Health.OFFLINE


def test_a_slurm_lookup_with_a_silent_part_proves_no_name_absent() -> None:
    d = get_dialect("slurm")
    mark = BATCH_MARK

    def answer(live_rc: int, done_rc: int) -> CommandResult:
        out = (
            f"{mark} begin live\n42|fedhpc-t1-1\n{mark} end live {live_rc}\n"
            f"{mark} begin done\n{mark} end done {done_rc}\n"
        )
        return CommandResult(0, out, "")

    assert d.parse_find(answer(0, 0)) == {"fedhpc-t1-1": "42"}
    for live, done in ((1, 0), (0, 1)):
        with pytest.raises(TransportError, match="lookup did not answer"):
            d.parse_find(answer(live, done))
