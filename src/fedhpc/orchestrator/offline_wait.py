"""Waiting for an offline site: a task that only offline sites could run (its candidates there
fail only because the site's last probe failed; every other candidate is ruled out) waits in
fedhpc, `queued` with the reason, and is placed when a site answers again. A pinned task
(fixed_site) whose site is down is the common case. A site that can never run the envelope is
no reason to wait: its candidates fail on something else too. The agent hears it once per
outage, as `task.waiting_for_site` (a group's: `group.waiting_for_site`), when the wait has
lasted `after_s` (a blip wakes nobody)."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime

from fedhpc.collector.service import Collector
from fedhpc.domain.units import as_utc
from fedhpc.orchestrator.book import TaskBook
from fedhpc.orchestrator.liveness import offline
from fedhpc.orchestrator.records import TaskRecord
from fedhpc.placement import Category, Outcome, Unschedulable
from fedhpc.store import Tx

__all__ = [
    "GROUP_MOVE",
    "OFFLINE_WAIT",
    "OfflineWaits",
    "move_hint",
    "offline_sites",
    "pinned",
    "waits_for",
]

OFFLINE_WAIT = "queued: waiting for "
# A site's name as SAFE_NAME allows it (`+` too: "a+b" had read as no site at all).
_SITE = re.compile(r"(?:^queued: waiting for |; )([A-Za-z0-9][A-Za-z0-9_.+-]*): offline since ")
_ERROR_CHARS = 200  # of the last probe's error, in the reason


# What an offline site's candidates may fail on and still fit once it answers: the health
# rule (offline), and freshness: the collector probes a failing site less often (backoff), so
# its offline verdict ages past the staleness bound while the outage lasts.
_OFFLINE = frozenset({Category.HEALTH, Category.FRESHNESS})


def offline_sites(collector: Collector, u: Unschedulable) -> list[str]:
    """Sites whose candidates failed only because the site is offline: the task fits there
    once it answers. Empty when no such candidate exists."""
    out: set[str] = set()
    for c in u.trace.candidates:
        if c.feasible or c.site in out or not offline(collector, c.site):
            continue
        fails = {r.category for r in c.rules if r.outcome is Outcome.FAIL}
        if Category.HEALTH in fails and fails <= _OFFLINE:
            out.add(c.site)
    return sorted(out)


def waits_for(task: TaskRecord) -> list[str]:
    """The offline sites a queued task waits for (from its decision line); empty otherwise."""
    if not task.decision.startswith(OFFLINE_WAIT):
        return []
    return _SITE.findall(task.decision.split("; fedhpc places it")[0])


def pinned(task: TaskRecord) -> bool:
    """Pinned to its fixed_site without fallback: replan cannot move it elsewhere."""
    return task.request.fixed_site is not None and not task.request.fallback


def _when(at: datetime) -> str:
    return f"{as_utc(at):%Y-%m-%d %H:%M:%S} UTC"


def move_hint(task: TaskRecord) -> str:
    """How to run a waiting task elsewhere instead, true for its kind: a staged task runs only
    at its data site (placement drops every other site, replan refuses to include one)."""
    if task.data_site is not None or task.request.stage_in:
        where = task.data_site or "the site its stage-in copied its inputs to"
        return (
            f"It runs only at {where}, where its inputs are: to run it elsewhere instead, "
            "cancel it, move_data its inputs to another site and submit it again with the new "
            "transfer in stage_in; replan cannot move it."
        )
    if pinned(task):
        return (
            f"To run it elsewhere instead, cancel it and submit again with another fixed_site "
            f"(or fallback: true); replan cannot move a task pinned to {task.request.fixed_site}."
        )
    return (
        "To run it elsewhere instead, replan it with an envelope another site can run, or "
        "cancel it."
    )


# A group's children are never pinned nor staged (submit_group has neither): replan moves them.
GROUP_MOVE = (
    "To run its waiting children elsewhere instead, replan each (while the round is open) with "
    "an envelope another site can run, or cancel them."
)


class OfflineWaits:
    """Holds tasks for offline sites: their decision line, and one event per outage."""

    def __init__(
        self,
        book: TaskBook,
        collector: Collector,
        *,
        clock: Callable[[], datetime],
        after_s: float,
    ) -> None:
        self.book = book
        self.collector = collector
        self.clock = clock
        self.after_s = after_s
        self._told: set[str] = set()  # events written by this process: not tried again
        self._outages: dict[str, tuple[datetime, int | None]] = {}  # this pass's, by site

    def forget(self) -> None:
        """A new placement pass: outages are read again (once per site and pass)."""
        self._outages.clear()

    async def _outage(self, site: str) -> tuple[datetime, int | None]:
        """When `site` went offline (its newest site.offline event) and that event's number;
        None while the event is not written yet: the collector marks a site offline as its
        probe fails but records the event after the whole round, and the newest site.offline
        until then is an earlier outage's (the last probe's time stands in for the start)."""
        if site in self._outages:
            return self._outages[site]
        went = await self.book.store.last_event("site.offline", site)
        back = await self.book.store.last_event("site.online", site)
        if went is not None and (back is None or back.seq < went.seq):
            out: tuple[datetime, int | None] = (went.created_at, went.seq)
        else:
            state = self.collector.latest.get(site)
            out = (state.collected_at if state is not None else self.clock()), None
        self._outages[site] = out
        return out

    async def reason(self, sites: list[str]) -> str:
        """The task's decision line while it waits: readable by a person and an agent."""
        parts = []
        for site in sites:
            since, _ = await self._outage(site)
            state = self.collector.latest.get(site)
            error = (state.error if state is not None else None) or "probe failed"
            parts.append(f"{site}: offline since {_when(since)} ({error[:_ERROR_CHARS]})")
        which = sites[0] if len(sites) == 1 else "one of them"
        return f"{OFFLINE_WAIT}{'; '.join(parts)}; fedhpc places it when {which} answers again"

    async def hold(self, task: TaskRecord, sites: list[str], reason: str, now: datetime) -> None:
        """Save the task's wait (when its reason changed), and tell its agent once per outage
        when it has waited `after_s` (counted from when this wait began, not from submission:
        a replan that reopens a task into a wait wakes nobody at once): a single task's own
        event, or its group's (a group hears no per-child events)."""
        began = False
        if not task.decision.startswith(OFFLINE_WAIT) or task.waiting_since is None:
            task.waiting_since, began = now, True  # a new wait, saved: a group's sibling may
            # have the reason already (`set_queued_decision`), never the wait's start
        changed = began or task.decision != reason
        task.decision = reason
        site = sites[0]
        since, seq = await self._outage(site)
        waited = (now - max(as_utc(since), as_utc(task.waiting_since))).total_seconds()
        told = f"{task.group_id or f'{task.id}:{task.reopened}'}:{site}:{seq}"
        tell = seq is not None and waited >= self.after_s and told not in self._told
        if not changed and not tell:
            return
        async with self.book.store.transaction() as tx:
            if changed:
                await self.book.save(tx, task, at=now)
            if tell and seq is not None:
                said = f"waited {waited:.0f} s: {reason.removeprefix('queued: ')}"
                if task.group_id is None:
                    await self.book.emit(
                        tx,
                        "task.waiting_for_site",
                        task,
                        key=f"{site}:{seq}",
                        site=site,
                        reason=said,
                        hint=move_hint(task),
                    )
                else:
                    await _group_waits(tx, task.group_id, site, seq, said=said, at=now)
                self._told.add(told)


async def _group_waits(
    tx: Tx, gid: str, site: str, outage: int, *, said: str, at: datetime
) -> None:
    """A group's continuation hears that its children wait for `site` once per outage, as one
    event (a child's own events do not wake it); what to do is the same for every child."""
    await tx.append_event(
        "group.waiting_for_site",
        gid,
        {
            "group_id": gid,
            "site": site,
            "reason": f"children of the group {said}",
            "hint": GROUP_MOVE,
            "result": f"fedhpc://groups/{gid}",
        },
        at=at,
        key=f"group.waiting_for_site:{gid}:{site}:{outage}",
    )
