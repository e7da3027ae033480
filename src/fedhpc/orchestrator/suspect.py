"""A suspect site (issue 40, item 4): its controller did not answer the observation's ping
within half a control cycle (`liveness.suspect_ping_s`). That is not a lost site: only the
probe's pings, each given the full `PING_TIMEOUT_S` and one asked again, take it offline
(`Collector`), so a ping slow on a loaded machine wakes no agent with a `site.offline`. But
its queued work that may run elsewhere gets a hedged copy elsewhere at once (`hedging`): the
first copy to start runs and the other is cancelled, and the copy on a site that is then lost
is set aside. A hung controller's work so has a new attempt within one or two control cycles,
not after two ping deadlines. New work avoids the site meanwhile (`suspect_sites`)."""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from fedhpc.domain.job import JobState
from fedhpc.orchestrator.adapt import Adaptation
from fedhpc.orchestrator.hedging import live_others
from fedhpc.orchestrator.records import AttemptRecord
from fedhpc.placement import Placement

__all__ = ["hedge_suspect"]

log = structlog.get_logger(__name__)

_WAITING = frozenset({JobState.SUBMITTED, JobState.PENDING})  # not started: may start elsewhere


async def hedge_suspect(
    adaptation: Adaptation, site: str, atts: Sequence[AttemptRecord], why: str
) -> list[str]:
    """Under the lock: each of `atts` (the suspect `site`'s attempts as stored) still waiting
    there, whose task has no other copy in play and a re-placement left in its budget, gets
    a copy placed elsewhere, its intent written for `send_later`. A task held to the site
    (no `fallback`) or that fits nowhere else stays; so does one whose owner has their
    `hedges_in_flight` copies on the other site already. The budget is not spent: the copy
    that loses is set aside. The ids of the tasks copied."""
    adaptation.planner.suspects.mark(site, why)  # new work goes elsewhere meanwhile
    hedger = adaptation.hedger
    if hedger is None:
        return []
    hedger.new_pass()  # copies in play counted from the store as it is now
    copied: list[str] = []
    for a in atts:
        if a.superseded or a.state not in _WAITING:
            continue
        task = await adaptation.book.load_task(a.task_id)
        if task.state.terminal or live_others(await adaptation.book.load_attempts(task.id), a.n):
            continue  # ended, or already a copy elsewhere: one is enough
        if task.replacements_used >= task.request.adaptation.max_replacements:
            continue  # a lost site would not move it either
        p = await adaptation.planner.decide(task, exclude=(site,))
        if not isinstance(p, Placement):
            continue
        if not await hedger.take(p.site, task.owner or ""):
            log.info("suspect site: no copy, the other site's budget is spent", task=task.id)
            continue
        await adaptation.dispatcher.later(task, p, copy_of=a.n)
        copied.append(task.id)
    if copied:
        log.warning(
            "site suspect: its queued work hedged elsewhere", site=site, tasks=copied, why=why
        )
    return copied
