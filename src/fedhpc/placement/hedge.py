"""Hedged submission's arithmetic (issue 42): when is a second (or third) copy of a task on
another site worth its cost? Each candidate's completion is its wait forecast plus its run and
environment time; the wait is read as a normal distribution through the forecast's p10-p90
band (the calibrated band where there is one, else the estimate and its p90), clipped at zero.
Submitting to several sites and cancelling the others when the first starts finishes at the
earliest of their completions, so a copy is worth adding when it moves the expected earliest
completion sooner by at least the task's `hedge_min_gain_s`. Pure: no clock, no I/O."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from fedhpc.placement.trace import Estimates

__all__ = ["Forecast", "HedgeChoice", "choose_copies", "expected_first", "forecast"]

_Z90 = 1.2815515655446004  # the standard normal's 90th percentile
_STEPS = 400  # integration steps over the completion times' range


@dataclass(frozen=True, slots=True)
class Forecast:
    """One candidate's completion time: `offset` (run + environment, seconds) after a wait
    of mean `mean_s` and spread `sigma_s` (0: the wait is known exactly), never below 0."""

    offset: float
    mean_s: float
    sigma_s: float

    def survival(self, t: float) -> float:
        """P(completion > t)."""
        w = t - self.offset
        if w < 0:
            return 1.0
        if self.sigma_s <= 0:
            return 1.0 if w < self.mean_s else 0.0
        return 0.5 * math.erfc((w - self.mean_s) / (self.sigma_s * math.sqrt(2)))

    def upper(self) -> float:
        """A completion time it exceeds with negligible probability."""
        return self.offset + max(0.0, self.mean_s) + 6 * self.sigma_s


def forecast(e: Estimates) -> Forecast | None:
    """The completion forecast of a scored candidate; None when its wait is unknown."""
    if not (math.isfinite(e.wait_s) and math.isfinite(e.runtime_s)):
        return None
    if e.wait_band is not None:
        p10, p50, p90 = e.wait_band
        sigma = max(0.0, (p90 - p10) / (2 * _Z90))
    else:
        p50 = e.wait_s
        p90 = e.wait_p90_s if math.isfinite(e.wait_p90_s) else e.wait_s
        sigma = max(0.0, (p90 - p50) / _Z90)
    return Forecast(offset=e.runtime_s + e.env_s, mean_s=p50, sigma_s=sigma)


def expected_first(forecasts: Sequence[Forecast]) -> float:
    """E[min of the completions] of independent forecasts: the integral of the probability
    that none has completed by t (trapezoids over [0, the latest upper bound], with a point
    on each side of an exact forecast's step)."""
    if not forecasts:
        return math.inf
    top = max(f.upper() for f in forecasts)
    if top <= 0:
        return 0.0
    steps = [f.offset + f.mean_s for f in forecasts if f.sigma_s <= 0]
    grid = {top * i / _STEPS for i in range(_STEPS + 1)}
    grid |= {x for s in steps if 0 < s <= top for x in (s - 1e-9, s)}
    points = sorted(grid)
    left = [math.prod(f.survival(t) for f in forecasts) for t in points]
    return sum(
        (points[i] - points[i - 1]) * (left[i] + left[i - 1]) / 2 for i in range(1, len(points))
    )


@dataclass(frozen=True, slots=True)
class HedgeChoice:
    """Which of the other candidates to submit copies to (their indexes, best first), and the
    expected completion alone and with them."""

    picked: tuple[int, ...]
    alone_s: float
    hedged_s: float

    @property
    def gain_s(self) -> float:
        return self.alone_s - self.hedged_s


def choose_copies(
    best: Estimates, others: Sequence[Estimates], *, copies: int, min_gain_s: float
) -> HedgeChoice:
    """Greedily, up to `copies - 1` of `others` (candidates on other sites), each added only
    when it moves the expected earliest completion sooner by at least `min_gain_s` (0: any
    other candidate is added)."""
    first = forecast(best)
    if first is None:
        return HedgeChoice((), math.inf, math.inf)
    chosen = [first]
    alone = now = expected_first(chosen)
    picked: list[int] = []
    pool = {i: f for i, e in enumerate(others) if (f := forecast(e)) is not None}
    while len(chosen) < copies and pool:
        gains = {i: now - expected_first([*chosen, f]) for i, f in pool.items()}
        i = max(gains, key=lambda k: (gains[k], -k))
        if gains[i] < min_gain_s - 1e-6:  # (rounding: an equal copy gains 0, not -1e-12)
            break
        chosen.append(pool.pop(i))
        picked.append(i)
        now -= gains[i]
    return HedgeChoice(tuple(picked), alone, now)
