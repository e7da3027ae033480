"""How long the daemon took to answer its REST requests, from the route's handler being
called to its answer's body being ready: the newest `KEPT`, summarised in GET /v1/health.
This is the daemon's own share of a caller's wait; the rest is the socket, the caller's own
work and the machine's run queue (benchmarks/sweep.py prints both)."""

from __future__ import annotations

import statistics
from collections import deque
from typing import Any

__all__ = ["KEPT", "RequestTimes"]

KEPT = 2000


class RequestTimes:
    """The newest `kept` answer times (route, milliseconds) and how many there were in all."""

    def __init__(self, kept: int = KEPT) -> None:
        self._ms: deque[tuple[str, float]] = deque(maxlen=kept)
        self.answered = 0

    def add(self, route: str, ms: float) -> None:
        self._ms.append((route, ms))
        self.answered += 1

    def summary(self) -> dict[str, Any]:
        """{answered, window, p50_ms, p99_ms, max_ms, slowest_route, by_route} over the window; the
        quantiles are absent until two answers are in it."""
        out: dict[str, Any] = {"answered": self.answered, "window": len(self._ms)}
        if len(self._ms) < 2:
            return out
        ms = [m for _, m in self._ms]
        q = statistics.quantiles(ms, n=100, method="inclusive")  # within the data
        route, slowest = max(self._ms, key=lambda r: r[1])
        per: dict[str, list[float]] = {}
        for r, m in self._ms:
            per.setdefault(r, []).append(m)
        return out | {
            "p50_ms": round(q[49], 1),
            "p99_ms": round(q[98], 1),
            "max_ms": round(slowest, 1),
            "slowest_route": route,
            # per route in the window: how many, their median and slowest (a submit's own
            # time in the daemon, beside the reads that dominate the overall quantiles)
            "by_route": {
                r: {
                    "n": len(v),
                    "p50_ms": round(statistics.median(v), 1),
                    "max_ms": round(max(v), 1),
                }
                for r, v in sorted(per.items())
            },
        }
