"""start_estimates without a scheduler to ask: dialects without a dry run, the per-cycle cache."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from fedhpc.adapters.command import Command, CommandResult
from fedhpc.adapters.dialects.lsf import LsfDialect
from fedhpc.adapters.site import SiteAdapter
from fedhpc.domain import Shape
from fedhpc.domain.config import Site, UserSiteConfig
from fedhpc.domain.site import PartitionState
from fedhpc.orchestrator.start_estimates import (
    EstimateCache,
    EstimateRequest,
    ask_scheduler,
    still_holds,
)
from fedhpc.profiles import load_profiles


class Recording:
    """A transport that records what it was asked to run and answers nothing useful."""

    def __init__(self) -> None:
        self.commands: list[Command] = []

    async def run(self, command: Command) -> CommandResult:
        self.commands.append(command)
        return CommandResult(0, "", "")

    async def aclose(self) -> None:
        return None


def _req(site: str, partition: str = "p", gpus: int = 1) -> EstimateRequest:
    return EstimateRequest(site, partition, "acct", Shape(cpus=4, gpus=gpus, wall_time_s=600))


async def test_pbs_and_lsf_sites_are_not_asked_and_the_note_names_the_missing_command(
    tmp_path: Path,
) -> None:
    polaris = Site(load_profiles()["polaris"], UserSiteConfig())
    pbs_t, lsf_t = Recording(), Recording()
    adapters = {
        "polaris": SiteAdapter(polaris, pbs_t),  # type: ignore[arg-type]
        "lsfsite": SiteAdapter(polaris, lsf_t, dialect=LsfDialect()),  # type: ignore[arg-type]
    }
    answer = await ask_scheduler([_req("polaris"), _req("lsfsite")], adapters)
    assert answer.starts == {}
    assert answer.calls == 0
    assert pbs_t.commands == [] and lsf_t.commands == []
    assert answer.notes["polaris"].startswith("PBS Pro has no start-estimate command")
    assert answer.notes["lsfsite"].startswith("LSF has no start-estimate command")


async def test_a_site_without_an_adapter_or_skipped_is_noted_not_asked() -> None:
    answer = await ask_scheduler(
        [_req("gone"), _req("down")], {}, skip={"down": "offline (its last probe failed)"}
    )
    assert answer.calls == 0
    assert answer.notes == {"gone": "no adapter", "down": "offline (its last probe failed)"}


def test_the_cache_holds_answers_and_failures_for_one_cycle_and_forgets_a_placed_partition() -> (
    None
):
    now = [100.0]
    cache = EstimateCache(ttl_s=10, clock=lambda: now[0])
    start = datetime(2026, 1, 1, tzinfo=UTC)
    a, b = _req("s", "p"), _req("s", "q")
    cache.put(a, start, now[0])
    cache.put(b, None, now[0])  # refused: remembered as refused, not asked again
    cache.fail("hung", "no answer within 2 s")
    assert cache.get(a) == (start, 100.0)
    assert cache.get(b) == (None, 100.0)
    assert cache.failed("hung") == "no answer within 2 s"
    cache.drop_partition("s", "p")
    assert cache.get(a) is None and cache.get(b) is not None
    now[0] = 110.5
    assert cache.get(b) is None and cache.failed("hung") is None
    cache.prune()
    assert cache.get(b) is None
    # Failing again in a row: the pause doubles (20 s), up to 8 cycles; an answer resets it.
    cache.fail("hung", "no answer within 2 s")
    now[0] = 125.0
    assert cache.failed("hung") is not None
    now[0] = 131.0
    assert cache.failed("hung") is None
    for _ in range(6):
        cache.fail("hung", "x")
    now[0] += 79.0
    assert cache.failed("hung") == "x"
    now[0] += 2.0
    assert cache.failed("hung") is None
    cache.put(_req("hung"), start, now[0])
    cache.fail("hung", "y")
    now[0] += 10.5
    assert cache.failed("hung") is None


def test_accounting_rows_become_wait_observations_by_size_and_fedhpcs_own_are_left_out() -> None:
    from datetime import timedelta

    from fedhpc.adapters.dialects.slurm import SlurmDialect
    from fedhpc.domain import AccountingRecord, JobState
    from fedhpc.orchestrator.estimates import _observation

    t = datetime(2026, 1, 1, tzinfo=UTC)

    def row(name: str, tres: dict[str, str], start: datetime | None) -> AccountingRecord:
        return AccountingRecord(
            job_id="1",
            name=name,
            partition="gpu",
            state=JobState.RUNNING,
            native_state="RUNNING",
            submit=t - timedelta(seconds=5),
            eligible=t,
            start=start,
            alloc_tres=tres,
        )

    two_nodes = {"node": "2", "gres/gpu": "8", "cpu": "32"}
    got = _observation("s", row("train", two_nodes, t + timedelta(seconds=90)))
    assert got is not None
    assert (got.partition, got.nodes, got.gpus, got.cpus, got.wait_s) == ("gpu", 2, 4, 16, 90.0)
    assert _observation("s", row("train", two_nodes, None)) is None  # not started: no wait yet
    ours = row("fedhpc-t1a2b3c4d5e-1", two_nodes, t)
    assert _observation("s", ours) is None  # its attempt records the wait already
    assert _observation("s", row("fedhpc-load-x-1", {}, t)) is not None  # not a fedhpc task
    argv = SlurmDialect().user_jobs_command("alice", 86400).argv
    assert argv[:4] == ("sacct", "--noheader", "--parsable2", "--allocations")
    assert "--user=alice" in argv and "--starttime=now-86400seconds" in argv


def test_a_start_now_answer_holds_while_the_probe_has_room_for_what_was_placed_since() -> None:
    asked = datetime(2026, 1, 1, tzinfo=UTC)
    one = Shape(cpus=4, gpus=1)
    part = PartitionState(
        name="p", free_cpus=16, free_gpus=2, total_cpus=32, total_gpus=4, max_free_cpus_on_node=8
    )
    assert still_holds(asked, asked, one, part, [one])  # 8 CPUs, 2 GPUs of 16 and 2
    assert not still_holds(asked, asked, one, part, [one, one])  # a third GPU: none left
    later = asked + timedelta(minutes=5)  # a queued start moves once a job goes before it
    assert not still_holds(later, asked, one, part, [Shape(cpus=1)])
    assert not still_holds(asked, asked, Shape(nodes=2, cpus=4), part, [])  # one node only
    assert not still_holds(asked, asked, Shape(cpus=12), part, [])  # no node has 12 free
    assert not still_holds(asked, asked, one, None, [])  # a partition the probe lacks
    down = part.model_copy(update={"available": False})
    assert not still_holds(asked, asked, one, down, [])
    assert still_holds(asked, asked, Shape(cpus=2), part, [Shape(cpus=2)] * 7)  # 16 of 16
    assert not still_holds(asked, asked, Shape(cpus=2), part, [Shape(cpus=2)] * 8)
