"""The orchestrator: the one driver of the daemon's task work. It builds the parts, each given
only what it needs (the store, the adapters, the live view, one another), and drives them:
accepting a submission durably (answered at once, `accept`, `groups`), placing and
dispatching it (`placer`, `planner`, `dispatch`), then owning the remote lifecycle in control
cycles (`control`, `adapt`, `staging`, `groups`). Placement, the merge of observations and
adaptation share one lock; no submission and no observation runs while it is held (a slow or
dead site costs only itself); accepting a submission does not wait for it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime

import anyio
import structlog

from fedhpc.adapters.liveness import PING_TIMEOUT_S
from fedhpc.adapters.site import SiteAdapter
from fedhpc.collector import Collector
from fedhpc.domain.config import HedgeConfig, Site
from fedhpc.orchestrator import idem, staging
from fedhpc.orchestrator.accept import PLACE_WAIT_S, Acceptance, Intake
from fedhpc.orchestrator.adapt import Adaptation
from fedhpc.orchestrator.answers import Answers
from fedhpc.orchestrator.book import TaskBook
from fedhpc.orchestrator.claims import Claims
from fedhpc.orchestrator.control import Control
from fedhpc.orchestrator.dispatch import Dispatcher
from fedhpc.orchestrator.estimates import WaitInputs
from fedhpc.orchestrator.groups import STALL_AFTER_S, Groups
from fedhpc.orchestrator.placer import Placer
from fedhpc.orchestrator.planner import Planner
from fedhpc.orchestrator.records import AttemptRecord, TaskRecord
from fedhpc.orchestrator.task_tools import TaskTools
from fedhpc.placement import Goal
from fedhpc.profiles import load_user_config
from fedhpc.store import Store

__all__ = ["Orchestrator"]

log = structlog.get_logger(__name__)


def _utcnow() -> datetime:
    return datetime.now(UTC)


class Orchestrator:
    """Tasks and attempts. `tick()` is one control cycle; `run()` repeats it and runs the
    placer. The daemon's faces use its parts: `intake` (submit_task), `groups`, `tools`
    (get_result, list_tasks, cancel, replan), `answers` (each answer's `next` line), `book`."""

    # An intent (attempt written, job id unknown) younger than this may still be in sbatch:
    # only older intents that the scheduler does not know are submitted again.
    INTENT_GRACE_S = 45.0

    def __init__(
        self,
        store: Store,
        collector: Collector,
        adapters: Mapping[str, SiteAdapter],
        *,
        cycle_s: float = 10.0,
        stall_s: float = STALL_AFTER_S,
        intent_grace_s: float | None = None,
        site_lost_after_s: float = 300.0,
        retry_window_s: float = idem.RETRY_WINDOW_S,
        place_wait_s: float = PLACE_WAIT_S,
        ping_timeout_s: float = PING_TIMEOUT_S,
        clock: Callable[[], datetime] = _utcnow,
        estimate_timeout_s: float = 2.0,
        submits_per_cycle: int = 100,
        default_goal: Goal | None = None,
        default_hedge: HedgeConfig | None = None,
    ) -> None:
        if default_goal is None or default_hedge is None:  # the user config's, read at start
            config = load_user_config()
            default_goal = default_goal or Goal(config.goal)
            default_hedge = default_hedge or config.hedge
        self.store = store
        self.collector = collector
        self.adapters = dict(adapters)
        self.cycle_s = cycle_s
        self.clock = clock
        self.lock = anyio.Lock()  # the writers (placement, merges, adaptation): one at a time
        self.wake = anyio.Event()  # starts the next control cycle now
        self.cycles = 0
        self._calls_seen: dict[str, int] = {}  # site -> remote calls counted at the last cycle
        self.calls_per_cycle_max: dict[str, int] = {}
        self.notify: Callable[[], None] = lambda: None  # told after events may have landed
        # Why the daemon cannot start a runtime's resumes now ("" = it can): set by the daemon
        # to its bridge's check, so that no answer says "end your turn" when nothing will wake.
        self.resume_blocker: Callable[[str], str] = lambda _runtime: ""
        self.book = book = TaskBook(store, clock)
        self.claims = claims = Claims(collector)
        self.waits = waits = WaitInputs(
            store,
            collector,
            self.adapters,
            clock=clock,
            cycle_s=cycle_s,
            timeout_s=estimate_timeout_s,
        )
        self.planner = planner = Planner(
            collector,
            waits,
            clock=clock,
            submits_per_cycle=submits_per_cycle,
            default_goal=default_goal,
            suspect_hold_s=3 * cycle_s,
        )
        self.dispatcher = dispatcher = Dispatcher(
            book, self.adapters, claims, waits, lock=self.lock, clock=clock
        )
        self.placer = placer = Placer(
            book,
            collector,
            planner,
            dispatcher,
            claims=claims,
            waits=waits,
            lock=self.lock,
            clock=clock,
            cycle_s=cycle_s,
            notify=self._notify,
            site_lost_after_s=site_lost_after_s,
            hedge=default_hedge,
        )
        self.adaptation = adaptation = Adaptation(
            book,
            collector,
            self.adapters,
            planner,
            dispatcher,
            clock=clock,
            site_lost_after_s=site_lost_after_s,
            lock=self.lock,
            hedger=placer.hedger,
        )
        self.control = Control(
            book,
            collector,
            self.adapters,
            adaptation,
            claims,
            lock=self.lock,
            wake_placer=placer.wake,
            clock=clock,
            intent_grace_s=self.INTENT_GRACE_S if intent_grace_s is None else intent_grace_s,
            cycle_s=cycle_s,
            ping_timeout_s=ping_timeout_s,
        )
        accept = Acceptance(
            book,
            collector,
            accepting=anyio.Lock(),  # a retry's lookup and the insert it races with
            clock=clock,
            retry_window_s=retry_window_s,
            place_wait_s=place_wait_s,
            notify=self._notify,
            wake_placer=placer.wake,
            wait_placed=placer.wait_placed,
        )
        self.intake = Intake(accept)
        self.groups = Groups(accept, cycle_s=cycle_s, replace=self._relax, stall_s=stall_s)
        self.tools = TaskTools(
            book,
            collector,
            self.adapters,
            planner,
            dispatcher=dispatcher,
            adaptation=adaptation,
            lock=self.lock,
            clock=clock,
            wake_placer=placer.wake,
            wait_placed=placer.wait_placed,
            place_wait_s=place_wait_s,
        )
        self.answers = Answers(book, self._blocker)

    @property
    def sites(self) -> dict[str, Site]:
        return self.collector.sites

    def _notify(self) -> None:
        self.notify()  # read when called: the daemon sets `notify` after construction

    def _blocker(self, runtime: str) -> str:
        return self.resume_blocker(runtime)  # likewise set by the daemon

    async def _relax(self, task: TaskRecord, att: AttemptRecord) -> bool:
        """A group's last child still pending, without the spread constraint: moved if any
        placement now beats staying."""
        return await self.adaptation.replace_if_better(task, att, margin_s=0.0)

    def count_cycle(self) -> None:
        """Start a control cycle: the remote calls each site took since the last one (probes,
        submissions, status, accounting, file reads) raise that site's per-cycle maximum."""
        self.cycles += 1
        self.planner.placed_this_cycle.clear()
        for name, adapter in self.adapters.items():
            total = sum(adapter.calls.values())
            since = total - self._calls_seen.get(name, 0)
            self._calls_seen[name] = total
            self.calls_per_cycle_max[name] = max(self.calls_per_cycle_max.get(name, 0), since)

    def remote_calls(self) -> dict[str, dict[str, object]]:
        """Per site: remote calls by kind since the daemon started, and the most in a cycle;
        scheduler commands in the last minute, the most in any minute, the site's cap, and the
        seconds commands waited under it (`CommandPace`)."""
        return {
            name: {
                "total": dict(sorted(a.calls.items())),
                "max_per_cycle": self.calls_per_cycle_max.get(name, 0),
                "per_min": a.pace.rate(),
                "peak_per_min": a.pace.peak,
                "cap_per_min": a.pace.per_min,
                "waited_s": round(a.pace.waited_s, 1),
            }
            for name, a in sorted(self.adapters.items())
        }

    async def tick(self) -> None:
        """One control cycle: observe (every site at once, each merged under the lock as soon
        as it answers), then adapt under the lock: one writer at a time, and no submission
        while it is held (the jobs adaptation submits go after it). Outside it, now and then,
        the user's jobs from each site's accounting (the learned wait estimator)."""
        self.count_cycle()
        try:
            await self.waits.learn_from_accounting()
        except Exception:  # estimates only: never stalls the cycle
            log.exception("reading the user's accounting failed")
        await self.control.observe()
        async with self.lock:
            self.waits.new_cycle()  # this cycle's finished attempts join the wait history
            await self.adaptation.adapt_pending()
            await staging.advance(self.book, self.placer.wake)  # stage-in done: queue them
            await self.groups.advance()
        await self.adaptation.cancels.send(self.adaptation.owed)  # after the lock
        await self.dispatcher.send_later()  # re-placements and retries, without the lock
        self.notify()

    async def place_queued(self) -> int:
        """One placement pass over every queued task; the number dispatched."""
        return await self.placer.place_queued()

    async def run(self, stopping: anyio.Event) -> None:
        """Control cycles and the placer, until `stopping` is set."""
        self.control.leading_since = self.clock()
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.placer.run, stopping, name="placer")
            tg.start_soon(self._cycles, stopping, name="control")

    async def _cycles(self, stopping: anyio.Event) -> None:
        """Control cycles until `stopping` is set; `wake` starts one early."""
        await self.collector.ready.wait()  # never act on a view from before this process
        try:  # what a leader killed mid-way left: ends whose task never heard of them
            async with self.lock:
                await self.control.finish_ends()
        except Exception:  # logged; the cycles run all the same
            log.exception("finishing ends left half-done failed")
        while not stopping.is_set():
            started = anyio.current_time()
            try:
                await self.tick()
            except Exception:  # a bad cycle is logged and retried, never fatal to the daemon
                log.exception("control cycle failed")
            # Cycles start every cycle_s (not cycle_s after the last one ended): a slow cycle
            # does not stretch the interval the continuation latency is measured against.
            with anyio.move_on_after(max(0.0, started + self.cycle_s - anyio.current_time())):
                await self.wake.wait()
            self.wake = anyio.Event()
        self.placer.wake()  # stopping: the placer ends its wait too
