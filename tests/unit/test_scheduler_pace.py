"""Scheduler etiquette per site: a cap on commands per minute (a token bucket that makes the
caller wait, never refuses) and a floor between two observations of a site's jobs; the
defaults follow what centers ask, a user's config only makes them stricter."""

from __future__ import annotations

import tomllib

import anyio
import anyio.lowlevel
import pytest

from fedhpc.adapters.command import Command, CommandResult, batch
from fedhpc.adapters.liveness import Ping, gated
from fedhpc.adapters.pace import BURST_MAX, CommandPace
from fedhpc.adapters.site import SiteAdapter
from fedhpc.adapters.submit_batch import SubmitEntry, submissions_command
from fedhpc.cli.daemon import pace_lines
from fedhpc.collector import Collector
from fedhpc.domain.config import Site, UserSiteConfig
from fedhpc.domain.site import SiteProfile
from fedhpc.orchestrator.service import Orchestrator
from fedhpc.profiles.loader import shipped_profiles_dir
from fedhpc.store import Store
from tests.unit.test_placement_world import cpu_partition, profile


def load_profile(name: str) -> SiteProfile:
    text = (shipped_profiles_dir() / f"{name}.toml").read_text()
    return SiteProfile.model_validate(tomllib.loads(text))


class VirtualTime:
    """A monotonic clock that only moves when a caller sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await anyio.lowlevel.checkpoint()  # a spinning caller can still be cancelled


class Answering:
    """A transport that answers every command at once with success (runs nothing: a real
    scancel here could reach another test's jobs)."""

    name = "answering"

    def __init__(self) -> None:
        self.argvs: list[tuple[str, ...]] = []
        self.counts: list[int] = []  # the scheduler commands each call runs

    async def run(self, command: Command) -> CommandResult:
        self.argvs.append(tuple(command.argv))
        self.counts.append(command.commands)
        return CommandResult(0, "", "")

    async def aclose(self) -> None:
        return None


def _send(pace: CommandPace, t: VirtualTime, n: int) -> list[float]:
    sent: list[float] = []

    async def go() -> None:
        for _ in range(n):
            await pace.acquire()
            sent.append(t.now)

    anyio.run(go)
    return sent


def test_a_burst_goes_at_once_then_commands_follow_the_cap() -> None:
    t = VirtualTime()
    pace = CommandPace(60, clock=t.clock, sleep=t.sleep)
    sent = _send(pace, t, 200)
    assert sent[:BURST_MAX] == [0.0] * BURST_MAX
    # After the burst: one a second (60 a minute), never faster, until the minute is full.
    gaps = [b - a for a, b in zip(sent[BURST_MAX:60], sent[BURST_MAX + 1 : 60], strict=False)]
    assert all(g == pytest.approx(1.0) for g in gaps) and sent[59] == pytest.approx(40.0)
    # The 61st waits until the burst leaves the minute (the bucket alone sent it at 41 s:
    # 80 commands in the first minute, cap + burst).
    assert sent[60] == pytest.approx(60.0, abs=0.01)
    # Any 60 s holds at most 60, over the whole run.
    for i, at in enumerate(sent):
        assert sum(1 for x in sent[i:] if x < at + 60.0) <= 60, at
    assert pace.waited_s > 0 and pace.peak == 60


def test_a_sweeps_commands_stay_under_slurms_rate_limiter_defaults() -> None:
    """rl_enable: a bucket of 30 requests per user, refilled 2 a second; the default cap never
    empties it."""
    t = VirtualTime()
    pace = CommandPace(
        Site(profile("c", cpu_partition("p")), UserSiteConfig()).profile.command_cap,
        clock=t.clock,
        sleep=t.sleep,
    )
    sent = _send(pace, t, 1000)
    bucket, last = 30.0, 0.0
    for at in sent:
        bucket = min(30.0, bucket + (at - last) * 2.0)
        last = at
        bucket -= 1.0
        assert bucket >= 0.0


def test_a_real_centers_defaults_are_a_60_per_minute_cap_and_a_120_s_status_floor() -> None:
    p = profile("center", cpu_partition("p"), min_refresh_s=120)
    assert p.command_cap == 60
    assert p.status_floor == 0  # unset: none; every shipped center sets it
    for name in ("delta", "anvil", "perlmutter", "polaris", "vista"):
        assert load_profile(name).status_floor == 120
    local = profile("dev", cpu_partition("p"), local_test=True)
    assert local.status_floor == 0
    assert local.command_cap == 6000
    own = profile("c2", cpu_partition("p"), status_floor_s=180, max_commands_per_min=20)
    assert (own.status_floor, own.command_cap) == (180, 20)


def test_the_users_config_only_makes_the_etiquette_stricter() -> None:
    base = profile("center", cpu_partition("p"), status_floor_s=120)
    strict = Site(base, UserSiteConfig(status_floor_s=300, max_commands_per_min=10)).profile
    assert (strict.status_floor, strict.command_cap) == (300, 10)
    lax = Site(base, UserSiteConfig(status_floor_s=5, max_commands_per_min=600)).profile
    assert (lax.status_floor, lax.command_cap) == (120, 60)


def test_a_site_is_observed_at_most_once_per_floor() -> None:
    far = Site(profile("center", cpu_partition("p"), status_floor_s=3600), UserSiteConfig())
    adapter = SiteAdapter(far, Answering())
    assert adapter.observe_due()
    assert not adapter.observe_due()  # within the hour: the control cycle skips the site
    near = Site(profile("dev", cpu_partition("p"), local_test=True), UserSiteConfig())
    local = SiteAdapter(near, Answering())
    assert local.observe_due()
    assert local.observe_due()


def test_every_command_of_an_adapter_waits_under_its_sites_cap() -> None:
    site = Site(profile("center", cpu_partition("p"), max_commands_per_min=6), UserSiteConfig())
    transport = Answering()
    adapter = SiteAdapter(site, transport)
    t = VirtualTime()
    adapter.pace = CommandPace(6, clock=t.clock, sleep=t.sleep)

    async def go() -> None:
        for _ in range(10):
            await adapter.cancel(["1"])

    anyio.run(go)
    assert adapter.calls["cancel"] == len(transport.argvs) == 10
    # 6 at once, then the next minute (a bucket alone sent one every 10 s: 10 in 40 s).
    assert t.now == pytest.approx(60.0, abs=0.01)
    assert adapter.pace.rate() == 4 and adapter.pace.peak == 6


def test_a_wait_ends_even_when_the_clock_cannot_show_it() -> None:
    """At a large clock value a tiny wait is lost in rounding (1e12 + 1e-5 == 1e12): the
    command goes after its wait all the same, never waits again for ever smaller bits."""
    t = VirtualTime()
    t.now = 1e12
    pace = CommandPace(10**6, clock=t.clock, sleep=t.sleep)

    async def go() -> None:
        with anyio.fail_after(10):  # a guard against the spin, not a timing assertion
            for _ in range(100):
                await pace.acquire()

    anyio.run(go)
    assert pace.rate() == 100


async def test_health_carries_each_sites_command_rate_peak_and_cap(store: Store) -> None:
    center = Site(profile("center", cpu_partition("p"), max_commands_per_min=30), UserSiteConfig())
    adapter = SiteAdapter(center, Answering())
    collector = Collector({"center": center}, {}, store)
    o = Orchestrator(store, collector, {"center": adapter}, retry_window_s=120)
    for _ in range(5):
        await adapter.cancel(["1"])
    calls = o.remote_calls()["center"]
    assert (calls["per_min"], calls["peak_per_min"], calls["cap_per_min"]) == (5, 5, 30)
    assert calls["total"] == {"cancel": 5}
    lines = pace_lines({"remote_calls": o.remote_calls()})
    assert lines == ["scheduler commands a minute (last, peak, cap): center 5/5/30"]


def test_status_shows_the_rate_of_sites_that_were_sent_commands_and_what_waited() -> None:
    calls = {
        "busy": {"per_min": 58, "peak_per_min": 60, "cap_per_min": 60, "waited_s": 42.4},
        "idle": {"per_min": 0, "peak_per_min": 0, "cap_per_min": 60, "waited_s": 0.0},
        "old": {"total": {}, "max_per_cycle": 0},  # a daemon from before the pace
    }
    assert pace_lines({"remote_calls": calls}) == [
        "scheduler commands a minute (last, peak, cap): busy 58/60/60 (waited 42 s)"
    ]
    assert pace_lines({}) == []


def test_a_probe_never_waits_behind_the_cap_and_the_next_command_pays_for_it() -> None:
    """At a cap of 2 a minute a probe queued behind work would run into its 30 s deadline and
    take a healthy site offline: it goes at once, and the command after it waits its debt."""
    site = Site(profile("center", cpu_partition("p"), max_commands_per_min=2), UserSiteConfig())
    transport = Answering()
    adapter = SiteAdapter(site, transport)
    t = VirtualTime()
    adapter.pace = CommandPace(2, clock=t.clock, sleep=t.sleep)
    waited: list[float] = []

    async def go() -> None:
        for _ in range(2):
            await adapter.cancel(["1"])  # the burst of 2 spent
        await adapter.probe()
        waited.append(t.now)
        await adapter.cancel(["1"])
        waited.append(t.now)

    anyio.run(go)
    assert waited[0] == 0.0  # the probe: at once
    # The probe's commands (its sections and the ping, in one call) are a debt the next
    # command waits off, at most a burst of it (2 here), then its own turn: 30 s each.
    probe = transport.counts[2]
    assert probe >= 4
    assert waited[1] == pytest.approx(30.0 * (min(probe, adapter.pace.burst) + 1))
    assert adapter.calls["probe"] == 1


def test_the_cap_counts_scheduler_commands_not_remote_calls() -> None:
    """A batched probe runs several commands in one remote call, a ping gate adds one, a
    batched submission runs one sbatch per job: the center's limit is on commands."""
    probe = batch({"queue": Command(("squeue",)), "nodes": Command(("scontrol", "show", "node"))})
    assert probe.commands == 2
    ping = Ping(Command(("scontrol", "ping")), lambda _r: None, "UP")
    assert gated(probe, ping).commands == 3
    assert gated(Command(("squeue", "-j", "1")), ping).commands == 2
    entries = [SubmitEntry(Command(("sbatch",), stdin="#!/bin/bash\n"), ()) for _ in range(5)]
    assert submissions_command(entries, timeout_s=60)[0].commands == 5

    site = Site(profile("center", cpu_partition("p"), max_commands_per_min=60), UserSiteConfig())
    adapter = SiteAdapter(site, Answering())
    t = VirtualTime()
    adapter.pace = CommandPace(60, clock=t.clock, sleep=t.sleep)

    async def go() -> None:
        await adapter.find(["fedhpc-t1-1"])  # one remote call: squeue and sacct, and a ping

    anyio.run(go)
    assert adapter.calls["find"] == 1
    assert adapter.pace.rate() == 3 if adapter.ping is not None else 2


def test_a_call_larger_than_a_burst_goes_whole_and_the_next_calls_pay_its_debt() -> None:
    t = VirtualTime()
    pace = CommandPace(60, clock=t.clock, sleep=t.sleep)  # a burst of 20, one a second

    async def go() -> list[float]:
        sent = []
        for n in (25, 1, 1):
            await pace.acquire(n)
            sent.append(t.now)
        return sent

    sent = anyio.run(go)
    assert sent[0] == 0.0  # a full burst was there: the 25 go whole
    assert sent[1] == pytest.approx(6.0)  # 5 over the burst, then one more token: 6 s
    assert sent[2] == pytest.approx(7.0)
    assert pace.rate() == 27 and pace.peak == 27


def test_a_look_at_the_jobs_waits_behind_one_submission_not_the_sweeps_backlog() -> None:
    """During a sweep's submission the cap is busy for minutes: the daemon's status and
    accounting calls go ahead of the queued submissions, so a job's end is still seen."""
    t = VirtualTime()
    pace = CommandPace(60, clock=t.clock, sleep=t.sleep)
    order: list[str] = []

    async def call(name: str, n: int, urgent: bool = False) -> None:
        order.append(f"{name} asked")
        await pace.acquire(n, urgent=urgent)
        order.append(name)

    async def go() -> None:
        async with anyio.create_task_group() as tg:
            for k in range(5):  # a backlog of submissions, 20 sbatch each
                tg.start_soon(call, f"submit{k}", 20)
                await anyio.lowlevel.checkpoint()
            await anyio.lowlevel.checkpoint()
            tg.start_soon(call, "status", 2, True)

    anyio.run(go)
    asked, went = order.index("status asked"), order.index("status")
    between = [o for o in order[asked:went] if not o.endswith("asked")]
    assert len(between) <= 1, order  # behind at most the submission under way
    assert [o for o in order if o.startswith("submit") and not o.endswith("asked")] == [
        f"submit{k}" for k in range(5)
    ]


def test_a_probes_commands_taken_while_a_call_waits_are_waited_off_not_forgiven() -> None:
    """A submission waiting its turn when the collector's probe goes: the probe's commands
    are owed by the submission too (they were forgiven: ~9 over the cap per probe)."""
    t = VirtualTime()
    pace = CommandPace(60, clock=t.clock, sleep=t.sleep)  # one a second, bursts of 20
    taken = False

    async def sleep(seconds: float) -> None:
        nonlocal taken
        await t.sleep(seconds)
        if not taken:  # the probe's 8 commands land during the first wait
            taken = True
            pace.take(8)

    pace._sleep = sleep  # the probe's moment, inside the wait

    async def go() -> None:
        await pace.acquire(20)  # the burst
        await pace.acquire(10)  # waits 10 s, and the probe's 8 on top: 18 s

    anyio.run(go)
    assert t.now == pytest.approx(18.0)
    assert pace.rate() == 38
