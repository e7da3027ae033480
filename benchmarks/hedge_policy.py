"""The `daemon+hedge` row of matched_rounds.py: the daemon's placement plus the hedged copies the
daemon's own arithmetic (`fedhpc.placement.hedge.choose_copies`, as `orchestrator/hedging.py`
calls it) would add for the round's request, judged on the round's matched jobs.

Every feasible partition already holds a matched job of the same shape, submitted at the same
moment, so a hedged submission's outcome can be read off them without disturbing the round:
the copies race, the first to START wins (the daemon cancels the others then), and the task
completes when that job completes. Its cost is one extra submission and one cancel per copy.
The copies are chosen from the snapshot the other policies saw, with the scheduler's start
estimates and the wait history (`bf-scheduler`'s inputs), each the best placement on a site
not yet holding a copy."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from fedhpc.domain import ResourceEnvelope
from fedhpc.placement import Placement, PlacementInputs, place
from fedhpc.placement.hedge import choose_copies

__all__ = ["Hedge", "hedge_copies", "winner"]


@dataclass(frozen=True)
class Hedge:
    keys: tuple[str, ...]  # "site/partition": the daemon's pick first, then its copies
    gain_s: float  # expected completion gained, by the forecasts


def hedge_copies(
    env: ResourceEnvelope,
    inputs: PlacementInputs,
    first: str,
    *,
    copies: int,
    min_gain_s: float,
) -> Hedge:
    """The copies hedging would add to the daemon's pick `first` ("site/partition")."""
    site = first.split("/", 1)[0]
    here = place(env.model_copy(update={"sites_include": (site,)}), inputs)
    if not isinstance(here, Placement):
        return Hedge((first,), 0.0)
    pool: list[Placement] = []
    exclude = {site}
    while len(pool) < copies - 1:
        q = place(env.model_copy(update={"sites_exclude": tuple(sorted(exclude))}), inputs)
        if not isinstance(q, Placement):
            break
        pool.append(q)
        exclude.add(q.site)
    choice = choose_copies(
        here.estimates, [q.estimates for q in pool], copies=copies, min_gain_s=min_gain_s
    )
    keys = (first, *(f"{pool[i].site}/{pool[i].partition}" for i in choice.picked))
    return Hedge(keys, choice.gain_s if choice.picked else 0.0)


def winner(keys: tuple[str, ...], starts: dict[str, datetime | None]) -> str:
    """The copy that started first (the daemon's pick when none of them started)."""
    started = [(s, i, k) for i, k in enumerate(keys) if (s := starts.get(k)) is not None]
    return min(started)[2] if started else keys[0]
