"""The collector: one batched probe per site per refresh, concurrently, into the store."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

import anyio
import structlog

from fedhpc.adapters.dialects.busy import SchedulerBusy
from fedhpc.adapters.liveness import ControllerSilent
from fedhpc.adapters.site import SiteAdapter
from fedhpc.collector.carry import carry_forward
from fedhpc.collector.credit import with_budgets
from fedhpc.collector.sanity import sanitize_state
from fedhpc.domain.config import Site
from fedhpc.domain.site import Health, SiteState
from fedhpc.errors import TransientError, typed_error
from fedhpc.store import Store, Tx

__all__ = ["Collector", "RefreshReport"]

log = structlog.get_logger(__name__)

# Rate-limit answers in a row that keep a site's last view; one more is judged as any failed
# probe (a hung controller can answer "Socket timed out" too: it must still be found lost).
BUSY_LIMIT = 3


def _utcnow() -> datetime:
    return datetime.now(UTC)


class RefreshReport:
    """What one refresh did: which sites were probed, how long each took, the whole round,
    and each probed site's new state (served only once the round has stored it)."""

    def __init__(self) -> None:
        self.probed: dict[str, float] = {}
        self.states: dict[str, SiteState] = {}
        self.wall_s = 0.0

    @property
    def slowest_s(self) -> float:
        return max(self.probed.values(), default=0.0)


class Collector:
    """Keeps the latest SiteState per site. Each site is probed at most once per its own
    interval (the larger of the daemon's refresh and the profile's `min_refresh_s`), and a
    failing site backs off exponentially up to 8 intervals."""

    def __init__(
        self,
        sites: Mapping[str, Site],
        adapters: Mapping[str, SiteAdapter],
        store: Store,
        *,
        refresh_s: float = 60.0,
        probe_timeout_s: float = 30.0,
        history_keep: int = 1440,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self.sites = dict(sites)
        self.adapters = dict(adapters)
        self.store = store
        self.refresh_s = refresh_s
        self.probe_timeout_s = probe_timeout_s
        self.history_keep = history_keep
        self._clock = clock
        self.latest: dict[str, SiteState] = {}
        self.remote_calls: Counter[str] = Counter()
        self._due: dict[str, float] = {}
        self._probed: dict[str, float] = {}  # site -> time.monotonic() its last probe started
        self._failures: Counter[str] = Counter()
        self._busy: Counter[str] = Counter()  # rate-limit answers in a row, per site
        self._silent: Counter[str] = Counter()  # unanswered pings in a row, per site
        self.wake = anyio.Event()
        self._changes: list[tuple[str, SiteState, Health | None]] = []
        self.ready = anyio.Event()  # set after the first refresh of this process
        # Called once a refresh has stored a site going offline: the control cycle acts on it
        # now (moves its queued work), not an interval later.
        self.on_lost: Callable[[], None] | None = None
        self._lost: dict[str, anyio.Event] = {}  # set when the site is next stored offline

    def interval(self, site: str) -> float:
        base = max(self.refresh_s, float(self.sites[site].profile.min_refresh_s))
        return base * float(min(8, 2 ** self._failures[site]))

    def probe_soon(self, site: str) -> None:
        """Probe `site` as soon as its profile allows (`min_refresh_s` after the last probe),
        whenever it was due: the control cycle could not observe it, and a dead controller is
        then known within one probe, not one refresh interval (or a backoff). At once when
        the observation found the controller down (its ping did not answer): the probe then
        starts with that same cheap ping, so the site is known lost within the cycle."""
        if site not in self.sites or self._busy[site]:  # backing off: the probe is set
            return
        allowed = self._probed.get(site, -1e18) + float(self.sites[site].profile.min_refresh_s)
        if getattr(self.adapters.get(site), "down", None) is not None:
            allowed = time.monotonic()
        self._due[site] = min(self._due.get(site, 0.0), allowed)
        self.wake.set()

    def _back_off(
        self, name: str, busy: SchedulerBusy, started: float, report: RefreshReport
    ) -> bool:
        """A scheduler shedding load is no lost site: keep its last view (degraded, saying
        why) and ask again after a doubled interval. False (judge it as any failed probe)
        without a live view, or after `BUSY_LIMIT` such answers in a row."""
        self._busy[name] += 1
        before = self.latest.get(name)
        if before is None or before.health is Health.OFFLINE or self._busy[name] > BUSY_LIMIT:
            return False
        update = {"health": Health.DEGRADED, "error": busy.message}
        report.states[name] = before.model_copy(update=update)
        wait = self.interval(name) * 2 ** self._busy[name]
        self._due[name] = started + wait
        log.warning("scheduler busy: backing off", site=name, seconds=wait, error=busy.message)
        return True

    def _ask_again(self, name: str, silent: ControllerSilent, report: RefreshReport) -> bool:
        """A controller that did not answer its ping in time, once, after answering before:
        keep the site's last view (degraded, saying why) and ping again at once. A second
        silence in a row takes the site offline (False: judged as any failed probe), so a
        hung controller is lost one ping deadline later and a loaded one that answers the
        second ping wakes no agent with a `site.offline` it never was."""
        self._silent[name] += 1
        before = self.latest.get(name)
        if before is None or before.health is Health.OFFLINE or self._silent[name] > 1:
            return False
        update = {"health": Health.DEGRADED, "error": silent.message}
        report.states[name] = before.model_copy(update=update)
        self._due[name] = time.monotonic()  # the run loop probes it again now
        log.warning("controller silent: asking again", site=name, error=silent.message)
        return True

    async def stored_offline(self, site: str) -> None:
        """Return once `site` is stored offline (at once if it is now)."""
        state = self.latest.get(site)
        if state is not None and state.health is Health.OFFLINE:
            return
        await self._lost.setdefault(site, anyio.Event()).wait()

    async def load(self) -> None:
        """Start from the store's latest states, so a restarted daemon serves a view at once."""
        stored = await self.store.latest_site_states()
        self.latest = {k: sanitize_state(v) for k, v in stored.items() if k in self.sites}

    async def _probe(self, name: str, report: RefreshReport) -> None:
        started = self._probed[name] = time.monotonic()
        self.remote_calls[name] += 1
        state: SiteState | None = None
        with anyio.move_on_after(self.probe_timeout_s):
            try:
                state = await self.adapters[name].probe(timeout_s=self.probe_timeout_s)
            except Exception as exc:  # a broken site must not stop the others
                typed = typed_error(exc)  # itself, or the typed error inside a task group
                if (
                    isinstance(typed, SchedulerBusy)
                    and self._back_off(name, typed, started, report)
                ) or (isinstance(typed, ControllerSilent) and self._ask_again(name, typed, report)):
                    report.probed[name] = time.monotonic() - started
                    return
                if typed is None:  # not a site's answer we know: a bug, with its traceback
                    log.exception("probe error", site=name)
                else:
                    log.warning("probe error", site=name, error=typed.message)
                why = f"probe failed: {typed.message if typed else exc}"
                # A person's move (a `fedhpc login`, an ssh master to open) is named; a
                # transient error's "retry later" is not: fedhpc retries it by itself.
                if typed and not isinstance(typed, TransientError) and typed.hint:
                    why += f" ({typed.hint})"
                at = self._clock()  # when the failure was seen, not when the probe began
                state = SiteState(site=name, health=Health.OFFLINE, collected_at=at, error=why)
        if state is None:
            state = SiteState(
                site=name,
                health=Health.OFFLINE,
                collected_at=self._clock(),
                error=f"probe timed out after {self.probe_timeout_s:g} s",
            )
        try:
            state = carry_forward(self.latest.get(name), sanitize_state(state))
            budgeted = with_budgets(state, self.sites[name])
        except Exception as exc:  # a surprising answer is this site's alone: offline, said why
            log.exception("probe answer unreadable", site=name)
            why = f"probe answer unreadable ({type(exc).__name__}: {str(exc)[:200]})"
            at = self._clock()
            state = SiteState(site=name, health=Health.OFFLINE, collected_at=at, error=why)
            budgeted = state
        if state.health is Health.OFFLINE:
            self._failures[name] += 1
            self._silent[name] = 0
        else:
            self._failures[name] = self._busy[name] = self._silent[name] = 0
        before = self.latest.get(name)
        if before is None or (before.health is Health.OFFLINE) != (state.health is Health.OFFLINE):
            self._changes.append((name, state, before.health if before else None))
        report.states[name] = budgeted
        elapsed = time.monotonic() - started
        report.probed[name] = elapsed
        self._due[name] = time.monotonic() + self.interval(name)
        log.info("probed", site=name, health=state.health.value, seconds=round(elapsed, 3))

    async def refresh(self, *, force: bool = False) -> RefreshReport:
        """Probe every site that is due (all with `force`), concurrently, and store the round."""
        now = time.monotonic()
        due = [n for n in self.sites if force or self._due.get(n, 0.0) <= now]
        report = RefreshReport()
        started = time.monotonic()
        async with anyio.create_task_group() as tg:
            for name in due:
                tg.start_soon(self._probe, name, report, name=f"probe:{name}")
        report.wall_s = time.monotonic() - started
        changes, self._changes = self._changes, []
        if report.states:
            with anyio.CancelScope(shield=True):  # a refresh that ran is always recorded
                async with self.store.transaction() as tx:
                    await tx.save_site_states(report.states.values(), keep=self.history_keep)
                    for name, state, before in changes:
                        await self._health_event(tx, name, state, before)
            # Served once stored: a view the daemon answered with survives its kill -9 (a
            # site probed early in a round waited here for the round's slowest probe).
            self.latest.update(report.states)
            lost = [name for name, s, _ in changes if s.health is Health.OFFLINE]
            for name in lost:
                self._lost.pop(name, anyio.Event()).set()
            if self.on_lost and lost:
                self.on_lost()
        self.ready.set()
        return report

    async def _health_event(
        self, tx: Tx, name: str, state: SiteState, before: Health | None
    ) -> None:
        """A site lost (offline) or regained is a decision-relevant event; other changes are
        routine and stay in the snapshots. A site first seen healthy emits nothing."""
        if state.health is Health.OFFLINE:
            kind = "site.offline"
        elif before is Health.OFFLINE:
            kind = "site.online"
        else:
            return
        await tx.append_event(
            kind,
            name,
            {"site": name, "health": state.health.value, "error": state.error},
            at=state.collected_at,
            key=f"{kind}:{name}:{state.collected_at.isoformat()}",
        )

    async def follow(self) -> None:
        """A follower's view (a daemon that does not lead a shared store): the leader's probes
        as it stores them, read again every refresh interval; never a scheduler command, so a
        site sees one daemon's probes however many serve. Cancelled once this daemon leads."""
        while True:
            await anyio.sleep(self.refresh_s)  # the first view was loaded at start
            try:
                await self.load()  # `ready` stays for this process's own first probes
            except Exception:  # the store out of reach: the view ages, says so, and is retried
                log.exception("reading the leader's site states failed")

    async def run(self, stopping: anyio.Event) -> None:
        """Refresh until `stopping` is set; `wake` forces an early refresh."""
        while not stopping.is_set():
            try:
                await self.refresh()
            except Exception:  # a bad round is logged and the next one runs, never fatal
                log.exception("refresh failed")
            next_due = min(self._due.values(), default=time.monotonic() + self.refresh_s)
            with anyio.move_on_after(max(0.05, next_due - time.monotonic())):
                await self.wake.wait()
            self.wake = anyio.Event()
