"""The collector with a fake transport that honours the Transport protocol and answers with
Slurm output recorded from the local federation; and the inspect_federation view."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest

from fedhpc.adapters.command import BATCH_MARK, STDERR_MARK, Command, CommandResult
from fedhpc.adapters.site import SiteAdapter
from fedhpc.adapters.transports.base import TransportError
from fedhpc.collector import Collector
from fedhpc.domain import AccountConfig, Arch, Health, UserConfig, UserSiteConfig
from fedhpc.domain.config import Site
from fedhpc.globus_auth.errors import GlobusLoginRequired
from fedhpc.ops.inspect import InspectRequest, inspect_federation
from fedhpc.profiles import load_federation
from fedhpc.store import Store

FIX = Path(__file__).parent.parent / "fixtures" / "slurm"
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def _probe_output(refused: tuple[str, ...] = ()) -> str:
    """The recorded probe; the sections named in `refused` as a rate-limited Slurm answers."""
    parts = []
    for name, file in (
        ("sinfo", "sinfo.txt"),
        ("nodes", "scontrol_show_node.txt"),
        ("queue", "squeue_queue.txt"),
        ("sshare", "sshare.txt"),
    ):
        if name in refused:
            busy = f"{STDERR_MARK} {name}: error: Socket timed out on send/recv operation"
            parts.append(f"{BATCH_MARK} begin {name}\n{busy}\n{BATCH_MARK} end {name} 1\n")
            continue
        parts.append(
            f"{BATCH_MARK} begin {name}\n{(FIX / file).read_text()}{BATCH_MARK} end {name} 0\n"
        )
    return "".join(parts)


class FakeTransport:
    """Answers every probe with recorded devvista output, or fails, or hangs, on demand."""

    name = "fake"

    def __init__(self) -> None:
        self.calls: list[Command] = []
        self.mode = "ok"

    async def run(self, command: Command) -> CommandResult:
        self.calls.append(command)
        if self.mode == "down":
            raise TransportError("connection refused")
        if self.mode == "hang":
            await anyio.sleep(60)
        if self.mode == "login":
            raise GlobusLoginRequired("nobody is logged in to Globus for fedhpc")
        if self.mode == "sshare-busy":
            return CommandResult(0, _probe_output(refused=("sshare", "queue")), "")
        return CommandResult(0, _probe_output(), "")

    async def aclose(self) -> None:
        return None


@pytest.fixture
def sites(monkeypatch: pytest.MonkeyPatch) -> dict[str, Site]:
    monkeypatch.setenv("FEDHPC_DEVFED", "1")
    config = UserConfig(
        sites={
            "devvista": UserSiteConfig(
                budget=500.0, accounts=(AccountConfig(name="fedhpc-gpu", budget=100.0),)
            )
        }
    )
    all_sites = load_federation(config)
    return {"devvista": all_sites["devvista"]}


def _collector(sites: dict[str, Site], store: Store, fake: FakeTransport) -> Collector:
    adapters = {"devvista": SiteAdapter(sites["devvista"], fake, clock=lambda: T0)}
    return Collector(sites, adapters, store, refresh_s=60, probe_timeout_s=0.5, clock=lambda: T0)


async def test_one_remote_call_per_site_per_refresh_and_history_stored(
    sites: dict[str, Site], store: Store
) -> None:
    fake = FakeTransport()
    col = _collector(sites, store, fake)
    await col.refresh(force=True)
    await col.refresh(force=True)
    assert len(fake.calls) == 2
    assert fake.calls[0].argv == ("bash", "-s")
    assert len(await store.site_history("devvista")) == 2
    gh = col.latest["devvista"].partition("gh")
    assert gh is not None
    assert gh.free_gpus == 1


async def test_sites_are_not_probed_before_their_interval(
    sites: dict[str, Site], store: Store
) -> None:
    fake = FakeTransport()
    col = _collector(sites, store, fake)
    await col.refresh()
    report = await col.refresh()  # not due yet: nothing is probed, nothing is written
    assert report.probed == {}
    assert len(fake.calls) == 1


async def test_budgets_from_config_join_live_usage(sites: dict[str, Site], store: Store) -> None:
    col = _collector(sites, store, FakeTransport())
    await col.refresh(force=True)
    credit = {c.account: c for c in col.latest["devvista"].credit}
    assert credit["fedhpc-gpu"].budget == 100.0  # the account's own budget
    assert credit["fedhpc-gpu"].used == 0.0  # live usage from sshare
    assert credit["fedhpc-cpu"].budget == 500.0  # falls back to the site budget


async def test_unreachable_or_hanging_site_goes_offline_with_its_error_and_an_event(
    sites: dict[str, Site], store: Store
) -> None:
    fake = FakeTransport()
    col = _collector(sites, store, fake)
    await col.refresh(force=True)
    fake.mode = "down"
    await col.refresh(force=True)
    state = col.latest["devvista"]
    assert state.health is Health.OFFLINE
    assert state.error is not None
    assert "connection refused" in state.error
    assert "Retry later" not in state.error  # fedhpc's own move: no hint for a person
    assert col.interval("devvista") == 120  # backing off
    fake.mode = "hang"
    with anyio.fail_after(5):
        await col.refresh(force=True)
    assert col.latest["devvista"].error == "probe timed out after 0.5 s"
    fake.mode = "ok"
    await col.refresh(force=True)
    assert col.latest["devvista"].health is Health.OK
    assert col.interval("devvista") == 60
    kinds = [e.kind for e in await store.events_after(0)]
    assert kinds == ["site.offline", "site.online"]  # one event per change, none for routine


async def test_a_probe_whose_sshare_was_refused_keeps_the_accounts_it_read_before(
    sites: dict[str, Site], store: Store
) -> None:
    """The rest of the site was read: it stays online (degraded, saying why), with the accounts,
    usage and queue counts of the last probe that read them, never an empty account list."""
    fake = FakeTransport()
    col = _collector(sites, store, fake)
    await col.refresh(force=True)
    before = col.latest["devvista"]
    fake.mode = "sshare-busy"
    await col.refresh(force=True)
    now = col.latest["devvista"]
    assert (now.health, now.unread) == (Health.DEGRADED, ("queue", "accounts"))
    assert now.error == "probe sections failed: queue, sshare"
    assert now.accounts == before.accounts and "fedhpc-gpu" in now.accounts
    assert now.credit == before.credit
    assert now.partition("gh") == before.partition("gh")  # same queue, same free GPUs
    fake.mode = "ok"
    await col.refresh(force=True)
    assert (col.latest["devvista"].health, col.latest["devvista"].unread) == (Health.OK, ())


async def test_a_site_that_needs_a_globus_login_shows_the_command_in_its_error(
    sites: dict[str, Site], store: Store
) -> None:
    fake = FakeTransport()
    fake.mode = "login"
    col = _collector(sites, store, fake)
    await col.refresh(force=True)
    state = col.latest["devvista"]
    assert state.health is Health.OFFLINE
    assert state.error is not None
    assert "nobody is logged in to Globus" in state.error
    assert "Run `fedhpc login`" in state.error


async def test_a_restarted_collector_starts_from_the_stored_view(
    sites: dict[str, Site], store: Store
) -> None:
    await _collector(sites, store, FakeTransport()).refresh(force=True)
    fresh = _collector(sites, store, FakeTransport())
    await fresh.load()
    assert fresh.latest["devvista"].health is Health.OK


class HeldTransport(FakeTransport):
    """Answers once `release` is set: a site whose probe is the round's slowest."""

    def __init__(self) -> None:
        super().__init__()
        self.release = anyio.Event()
        self.asked = False

    async def run(self, command: Command) -> CommandResult:
        self.asked = True
        await self.release.wait()
        return await super().run(command)


async def test_a_probed_state_is_served_only_once_its_round_is_stored(
    sites: dict[str, Site], store: Store
) -> None:
    """A site probed early in a round waits for the round's slowest probe before it is served:
    a daemon killed meanwhile must not have answered with a view it never stored (ci22a)."""
    fast, slow = FakeTransport(), HeldTransport()
    other = load_federation(UserConfig(sites={"devdelta": UserSiteConfig()}))["devdelta"]
    two = {"devvista": sites["devvista"], "devdelta": other}
    adapters = {
        "devvista": SiteAdapter(two["devvista"], fast, clock=lambda: T0),
        "devdelta": SiteAdapter(other, slow, clock=lambda: T0),
    }
    col = Collector(two, adapters, store, refresh_s=60, probe_timeout_s=5, clock=lambda: T0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(col.refresh)
        with anyio.fail_after(5):
            while not fast.calls or not slow.asked:
                await anyio.sleep(0.01)
        await anyio.sleep(0.05)  # the fast probe has parsed its answer
        assert col.latest == {}  # probed, not stored: not served
        assert await store.latest_site_states() == {}
        slow.release.set()
    stored = await store.latest_site_states()
    assert col.latest == stored and set(stored) == {"devvista", "devdelta"}
    assert col.latest["devvista"].health is Health.OK


async def test_inspect_marks_stale_sites_and_filters(sites: dict[str, Site], store: Store) -> None:
    col = _collector(sites, store, FakeTransport())
    await col.refresh(force=True)
    view = inspect_federation(col.latest, sites, now=T0 + timedelta(seconds=30), refresh_s=60)
    (site,) = view.sites
    assert not site.stale
    assert site.age_s == 30
    assert "gh-dev" in [p.name for p in site.partitions]
    late = inspect_federation(col.latest, sites, now=T0 + timedelta(hours=1), refresh_s=60)
    assert late.sites[0].stale
    only = inspect_federation(
        col.latest, sites, now=T0, refresh_s=60, request=InspectRequest(accelerator="H100")
    )
    assert only.sites == ()  # devvista has no H100: the site is filtered out
    cpus = inspect_federation(
        col.latest,
        sites,
        now=T0,
        refresh_s=60,
        request=InspectRequest(arch=Arch.AARCH64, accelerator="gh200"),
    )
    assert {p.name for p in cpus.sites[0].partitions} == {"gh", "gh-dev"}
    never = inspect_federation({}, sites, now=T0, refresh_s=60)
    assert never.sites[0].health is Health.OFFLINE
    assert never.sites[0].error == "never probed"


def test_inspect_shows_which_pending_jobs_are_blocked(sites: dict[str, Site]) -> None:
    """Recorded: on gh, one job pending on Resources and three that cannot start (dependency,
    hold, begin time): the agent sees the queue is mostly not ahead of it."""
    from fedhpc.adapters.command import BatchSection
    from fedhpc.adapters.dialects.slurm import SlurmDialect

    sections = {
        name: BatchSection(name, 0, (FIX / file).read_text())
        for name, file in (
            ("sinfo", "sinfo.txt"),
            ("nodes", "scontrol_show_node.txt"),
            ("queue", "squeue_queue_reasons.txt"),
            ("sshare", "sshare.txt"),
        )
    }
    state = SlurmDialect().parse_probe(sections, sites["devvista"].profile, "root", T0)
    view = inspect_federation({"devvista": state}, sites, now=T0, refresh_s=60)
    gh = next(p for p in view.sites[0].partitions if p.name == "gh")
    assert (gh.pending_jobs, gh.blocked_pending_jobs) == (4, 3)
