"""Hedged submission (issue 42): a task whose adaptation allows `hedge_copies` > 1 goes to up to
that many sites at once when their forecasts overlap enough to pay (`placement.hedge`). The
first copy to start runs; every other copy is set aside and cancelled at once, never counted
as a failure and never retried (`outrun`). A copy that fails, or whose site is lost, while
another copy is still in play is set aside the same way (`set_aside`). Each person has at most
`hedges_in_flight` copies in play per site (the site's etiquette budget), and every decision
says why it hedged and what that cost, or why it did not. A retry, a wall-time extension and a
move off a lost site are placements too, hedged the same way (`place_again`); a move to the one
site expected to start it sooner (`replace_pending`) is never hedged."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import structlog

from fedhpc.collector import Collector
from fedhpc.domain.config import HedgeConfig
from fedhpc.domain.job import ACTIVE
from fedhpc.orchestrator.book import TaskBook
from fedhpc.orchestrator.dispatch import Dispatcher
from fedhpc.orchestrator.planner import Planner
from fedhpc.orchestrator.records import AttemptRecord, TaskRecord
from fedhpc.orchestrator.start_estimates import SchedulerAnswer
from fedhpc.placement import Ledger, Placement
from fedhpc.placement.estimators import WaitHistory
from fedhpc.placement.hedge import choose_copies
from fedhpc.placement.policy import PolicyKind

__all__ = [
    "DEFAULT_IN_FLIGHT",
    "HedgePlan",
    "Hedger",
    "live_others",
    "outrun",
    "place_again",
    "set_aside",
]

log = structlog.get_logger(__name__)

DEFAULT_IN_FLIGHT = 4  # copies in play per person and site, unless the site's config says
_ACTIVE = tuple(sorted(s.value for s in ACTIVE))


def live_others(atts: Sequence[AttemptRecord], n: int) -> list[AttemptRecord]:
    """The task's attempts other than `n` still in play (not ended, not set aside)."""
    return [x for x in atts if x.n != n and not x.superseded and not x.state.terminal]


async def outrun(
    book: TaskBook, task: TaskRecord, winner: AttemptRecord, owe: Callable[[AttemptRecord], None]
) -> list[AttemptRecord]:
    """Under the lock: `winner` started first, so every other copy of its task still in play is
    set aside, outrun by it, and owes its cancel (`owe`; sent after the lock). Those copies,
    for the caller to save in the same transaction as the winner's start: a leader killed
    between two writes would leave both copies running, and the start is never seen again."""
    if winner.superseded:
        return []  # outrun itself a moment earlier: its own cancel is owed
    losers = live_others(await book.load_attempts(task.id), winner.n)
    for x in losers:
        x.superseded, x.outrun_by = True, winner.n
        x.reason = f"hedged copy: cancelled, attempt {winner.n} started first on {winner.site}"
        owe(x)
    if losers:
        log.info(
            "hedge won",
            task=task.id,
            attempt=winner.n,
            site=winner.site,
            cancelled=[f"{x.n}@{x.site}" for x in losers],
        )
    return losers


async def set_aside(book: TaskBook, task: TaskRecord, a: AttemptRecord, why: str) -> bool:
    """Under the lock: `a` (refused, failed, or on a lost site) is set aside when another copy
    of its task is still in play, which goes on: no retry or re-placement is spent on it, and
    no event is written. Whether it was."""
    others = live_others(await book.load_attempts(task.id), a.n)
    if not others:
        return False
    a.superseded = True
    a.reason = f"{why}; set aside: its copy on {others[0].site} goes on"
    async with book.store.transaction() as tx:
        await book.save_attempts(tx, a, at=book.clock())
    log.info("hedged copy set aside", task=task.id, attempt=a.n, site=a.site, why=why)
    return True


@dataclass(frozen=True, slots=True)
class HedgePlan:
    """A placed task's extra copies (best first) and what its decision says of them: why it
    was hedged and what it costs, or why not ("" when hedging was not asked for)."""

    copies: tuple[Placement, ...] = ()
    note: str = ""


class Hedger:
    """Decides a placed task's copies (`plan`) within each person's per-site budget, counted
    once per placement pass from the store and as copies are placed."""

    def __init__(
        self,
        book: TaskBook,
        collector: Collector,
        planner: Planner,
        *,
        defaults: HedgeConfig,
        clock: Callable[[], datetime],
    ) -> None:
        self.book = book
        self.collector = collector
        self.planner = planner
        self.defaults = defaults  # the user config's `[hedge]`: for a task that names none
        self.clock = clock
        self._live: Counter[tuple[str, str]] | None = None  # (site, owner) -> copies in play

    def new_pass(self) -> None:
        self._live = None

    def policy(self, task: TaskRecord) -> tuple[int, float]:
        """(copies, min_gain_s) for `task`: its adaptation's, else the config's. A task held
        to one site (`fixed_site`, or its inputs' site) is never hedged."""
        req = task.request
        if req.policy is PolicyKind.FIXED_SITE or req.fixed_site or task.data_site:
            return 1, 0.0
        a = req.adaptation
        copies = a.hedge_copies if a.hedge_copies is not None else self.defaults.copies
        gain = a.hedge_min_gain_s if a.hedge_min_gain_s is not None else self.defaults.min_gain_s
        return copies, gain

    def limit(self, site: str) -> int:
        conf = self.collector.sites.get(site)
        own = conf.user.hedges_in_flight if conf is not None else None
        return DEFAULT_IN_FLIGHT if own is None else own

    async def take(self, site: str, owner: str) -> bool:
        """Whether `owner` may have one more copy in play on `site` (counted if so)."""
        live = await self._in_flight()
        if live[(site, owner)] >= self.limit(site):
            return False
        live[(site, owner)] += 1
        return True

    async def _in_flight(self) -> Counter[tuple[str, str]]:
        """Copies in play per (site, owner), read from the store once per pass."""
        if self._live is None:
            live: Counter[tuple[str, str]] = Counter()
            owners: dict[str, str] = {}
            for row in await self.book.store.attempts_in(_ACTIVE):
                body = row["body"]
                if body.get("copy_of") is None or body.get("superseded"):
                    continue
                tid = str(row["task_id"])
                if tid not in owners:
                    task = await self.book.store.get_task(tid)
                    owners[tid] = str((task or {}).get("owner") or "")
                live[(str(row["site"]), owners[tid])] += 1
            self._live = live
        return self._live

    async def plan(
        self,
        task: TaskRecord,
        p: Placement,
        *,
        history: WaitHistory | None,
        ledger: Ledger | None,
        answer: SchedulerAnswer | None = None,
        avoid: tuple[str, ...] = (),
    ) -> HedgePlan:
        """`task`, placed at `p`: the copies worth submitting elsewhere, each the best placement
        on the sites left (never on `avoid`, the sites its placement avoided), kept while it
        brings the expected earliest finish sooner by the task's `hedge_min_gain_s`
        (`placement.hedge.choose_copies`)."""
        copies, min_gain = self.policy(task)
        if copies <= 1:
            return HedgePlan()
        live, owner = await self._in_flight(), task.owner or ""
        full = sorted(
            s
            for s in self.collector.sites
            if s != p.site and s not in avoid and live[(s, owner)] >= self.limit(s)
        )
        pool: list[Placement] = []
        # Not its own site, full ones, sites at this cycle's bound, nor those it must avoid.
        exclude = {p.site, *full, *self.planner.full(), *avoid}
        while len(pool) < copies - 1 and set(self.collector.sites) - exclude:
            q = await self.planner.decide(
                task,
                exclude=tuple(sorted(exclude)),
                history=history,
                ledger=ledger,
                answer=answer,
            )
            if not isinstance(q, Placement):
                break
            pool.append(q)
            exclude.add(q.site)
        if not pool:
            if full:
                return HedgePlan(note=f"not hedged: {_full(full, self)}")
            return HedgePlan(note="not hedged: no other site can run it")
        others = [q.estimates for q in pool]
        choice = choose_copies(p.estimates, others, copies=copies, min_gain_s=min_gain)
        if not choice.picked:
            best = choose_copies(p.estimates, others[:1], copies=2, min_gain_s=0.0)
            return HedgePlan(
                note=f"not hedged: a copy on {pool[0].site} would bring the expected finish "
                f"~{best.gain_s:.0f}s sooner, under hedge_min_gain_s {min_gain:.0f}s"
            )
        picked = tuple(pool[i] for i in choice.picked)
        for q in picked:
            live[(q.site, owner)] += 1
        where = ", ".join(f"{q.site}/{q.partition}" for q in picked)
        k = len(picked)
        return HedgePlan(
            picked,
            f"hedged: also on {where} (forecasts overlap: expected finish "
            f"~{choice.alone_s:.0f}s alone, ~{choice.hedged_s:.0f}s hedged); cost: {k} more "
            f"submission{'s' if k > 1 else ''}, cancelled when one copy starts",
        )


async def place_again(
    hedger: Hedger | None,
    dispatcher: Dispatcher,
    task: TaskRecord,
    p: Placement,
    *,
    avoid: tuple[str, ...] = (),
) -> None:
    """Under the lock (the control cycle's adaptation): `task` placed again at `p` (a retry, a
    wall-time extension, a move off a lost site), its intent written for `send_later`, and
    hedged under the task's policy and each person's per-site budget as a first placement is:
    its copies never on `avoid`, the sites the re-placement avoided. A plan that fails leaves
    it unhedged; a copy that cannot be written is dropped alone."""
    plan = HedgePlan()
    if hedger is not None:
        try:
            plan = await hedger.plan(task, p, history=None, ledger=None, avoid=avoid)
        except Exception:
            log.exception("hedging failed: placed again without copies", task=task.id)
    await dispatcher.later(task, p, note=plan.note)
    first = task.attempts_made
    for q in plan.copies:
        try:
            await dispatcher.later(task, q, copy_of=first)
        except Exception:
            log.exception("a hedged copy could not be written", task=task.id, site=q.site)


def _full(sites: list[str], hedger: Hedger) -> str:
    """Why these sites take no more of this person's copies (their `hedges_in_flight`)."""
    return "; ".join(
        f"{s} takes no hedged copies (hedges_in_flight = 0)"
        if hedger.limit(s) == 0
        else f"{s} already has {hedger.limit(s)} hedged copies of yours (hedges_in_flight)"
        for s in sites
    )
