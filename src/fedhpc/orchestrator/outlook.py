"""The wait outlook at the I/O edge: `placement.outlook` on what the placer reads (the collector's
latest probes, the learned index and the estimators' errors of this control cycle, the ledger of
claims), computed again only when one of them changed. No scheduler is asked: a read sends no
command to any site."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import anyio

from fedhpc.collector import Collector
from fedhpc.domain.site import ResourceSnapshot
from fedhpc.orchestrator.claims import Claims
from fedhpc.orchestrator.estimates import WaitInputs
from fedhpc.placement import Ledger, PlacementInputs, Policy
from fedhpc.placement.outlook import REFERENCE_WALL_S, REQUESTS, OutlookRow, outlook

__all__ = ["NOT_ASKED", "WaitOutlook"]

NOT_ASKED = (
    "the schedulers are not asked for this view (placement asks them only about its top "
    "candidates when it places a task): each wait is what its first pass ranks by"
)


class WaitOutlook:
    """The newest outlook, kept until the probes, the wait inputs or the claims change."""

    def __init__(
        self, collector: Collector, waits: WaitInputs, claims: Claims, clock: Callable[[], datetime]
    ) -> None:
        self.collector, self.waits, self.claims, self.clock = collector, waits, claims, clock
        self._lock = anyio.Lock()  # one computation at a time (several tabs poll)
        # What the kept rows were computed from (compared by identity, the ledger by value).
        self._seen: tuple[tuple[tuple[str, ...], ...], tuple[object, ...], Ledger] | None = None
        self._kept: dict[str, Any] | None = None
        self.computed = 0  # how often it was computed (tests read it)

    async def answer(self) -> dict[str, Any]:
        """`{at, requests, wall_s, scheduler, rows}`: `at` the time of the computation."""
        async with self._lock:
            history, errors = await self.waits.history(), await self.waits.errors()
            states = dict(self.collector.latest)
            ledger = self.claims.ledger()
            sites = self.collector.sites
            names = tuple(sorted(states)), tuple(sorted(sites))
            ids = (history, errors, sites, *(states[n] for n in names[0]))
            seen = self._seen
            if (
                self._kept is not None
                and seen is not None
                and seen[0] == names
                and all(a is b for a, b in zip(seen[1], ids, strict=True))
                and seen[2] == ledger
            ):
                return self._kept
            now = self.clock()
            inputs = PlacementInputs(
                ResourceSnapshot(taken_at=now, sites=states),
                sites,
                Policy(),
                now=now,
                history=history or (),
                errors=errors,
                ledger=ledger,
            )

            def run() -> list[OutlookRow]:
                return outlook(inputs)

            # Pure CPU work (one decision per request): off the event loop, as placement is.
            rows = await anyio.to_thread.run_sync(run)
            self.computed += 1
            self._seen = (names, ids, ledger)
            self._kept = {
                "at": now.isoformat(),
                "requests": list(REQUESTS),
                "wall_s": REFERENCE_WALL_S,
                "scheduler": NOT_ASKED,
                "rows": [r.model_dump() for r in rows],
            }
            return self._kept
