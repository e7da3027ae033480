"""A rate-limited scheduler's words reach the busy checks, and its refusals slow fedhpc down:
a batched call keeps each section's stderr apart from its output (it went to /dev/null, so
a refused `sinfo` in a probe read as a lost site and a refused `squeue` in a lookup as "no
answer"), and a refused observation waits twice as long each time before the next."""

from __future__ import annotations

import anyio
import pytest

from fedhpc.adapters.command import Command, CommandResult, batch, split_batch
from fedhpc.adapters.dialects.busy import SchedulerBusy, check_busy_lookup, check_busy_sections
from fedhpc.adapters.site import OBSERVE_BACKOFF_MAX_S, SiteAdapter
from fedhpc.adapters.transports.local import LocalTransport
from fedhpc.domain.config import Site, UserSiteConfig
from fedhpc.orchestrator.observed import alone as _alone
from tests.unit.test_placement_world import cpu_partition, profile
from tests.unit.test_scheduler_pace import Answering

REFUSED = "sinfo: error: Socket timed out on send/recv operation"


def _run_batch(sections: dict[str, Command]) -> str:
    async def go() -> str:
        return (await LocalTransport().run(batch(sections))).stdout

    return anyio.run(go)


def test_a_batched_sections_stderr_is_kept_apart_with_its_own_return_code() -> None:
    out = _run_batch(
        {
            "ok": Command(("bash", "-c", "echo out; echo a warning >&2")),
            "refused": Command(("bash", "-c", f"echo part; echo '{REFUSED}' >&2; exit 3")),
            "quiet": Command(("true",)),
        }
    )
    sections = split_batch(out)
    assert (sections["ok"].returncode, sections["ok"].stdout) == (0, "out\n")
    assert sections["ok"].stderr == "a warning\n"
    assert (sections["refused"].returncode, sections["refused"].stdout) == (3, "part\n")
    assert sections["refused"].stderr == f"{REFUSED}\n"
    assert (sections["quiet"].stdout, sections["quiet"].stderr) == ("", "")


def test_a_probe_or_lookup_refused_by_a_real_command_is_busy_not_lost() -> None:
    refuse = Command(("bash", "-c", f"echo '{REFUSED}' >&2; exit 1"))
    probe = split_batch(_run_batch({"nodes": Command(("true",)), "sinfo": refuse}))
    with pytest.raises(SchedulerBusy):
        check_busy_sections(probe, "slurm", ("nodes", "sinfo"))
    found = _run_batch({"live": refuse, "done": Command(("true",))})
    with pytest.raises(SchedulerBusy):
        check_busy_lookup(CommandResult(0, found, ""), "slurm")


def test_a_refused_observation_waits_twice_as_long_each_time_until_one_is_answered() -> None:
    site = Site(profile("center", cpu_partition("p"), local_test=True), UserSiteConfig())
    adapter = SiteAdapter(site, Answering())
    assert adapter.observe_due()
    waits = [adapter.observe_refused() for _ in range(9)]
    assert waits == [2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 120.0, 120.0, 120.0]
    assert waits[-1] == OBSERVE_BACKOFF_MAX_S
    assert not adapter.observe_due()  # within the wait: the control cycle skips the site
    adapter.observe_answered()
    assert adapter.observe_refused() == 2.0  # afresh after an answer


def test_a_busy_answer_from_inside_the_observation_task_group_is_seen_as_busy() -> None:
    busy = SchedulerBusy("squeue: the slurm scheduler is busy")
    assert _alone(ExceptionGroup("task group", [busy])) is busy
    assert _alone(ExceptionGroup("outer", [ExceptionGroup("inner", [busy])])) is busy
    two = ExceptionGroup("two", [busy, ValueError("x")])
    assert _alone(two) is two
