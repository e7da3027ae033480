"""placement_io without a scheduler to ask: dialects without a dry run, the per-cycle cache."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from fedhpc.adapters.command import Command, CommandResult
from fedhpc.adapters.dialects.lsf import LsfDialect
from fedhpc.adapters.site import SiteAdapter
from fedhpc.domain import Shape
from fedhpc.domain.config import UserSiteConfig
from fedhpc.placement_io import EstimateCache, EstimateRequest, ask_scheduler
from fedhpc.profiles import Site, load_profiles


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
