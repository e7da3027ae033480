"""How well an estimator's forecasts hold, judged the way they would have been used (pure).

Each placed job recorded what an estimator predicted; accounting later reports what happened.
The residuals (observed - predicted) of an estimator's earlier jobs give its forecast band for
the next one: p10/p90 = predicted + the residuals' conformal 80 % edges (`band_edges`), p50 =
predicted + their median (the QBETS idea: an empirical bound with a stated confidence, from
the estimator's own track record).
Calibration is scored *prequentially*: job i is judged against the band built from jobs
before it only, so coverage is what a caller relying on the band would have seen. A well
calibrated p10-p90 band covers 80 % of jobs; an estimator whose coverage drifts below
80 % - 10 loses weight (`weight` < 1), which `EstimatorErrors.prefer` divides its error by.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["TARGET_COVERAGE", "TOLERANCE", "Calibration", "band_edges", "calibrate", "quantile"]

TARGET_COVERAGE = 0.8  # the p10-p90 band
TOLERANCE = 0.1  # coverage of at least 80 % - 10 keeps full weight
MIN_WEIGHT = 0.1


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of an ascending, non-empty sequence."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def band_edges(sorted_values: Sequence[float]) -> tuple[float, float]:
    """The p10-p90 band's edges from n ascending residuals, as split conformal prediction
    takes them: the order statistics of rank floor(0.1 (n+1)) and ceil(0.9 (n+1)), held to
    1..n. A new exchangeable residual then falls inside with probability (hi - lo)/(n+1):
    81 % at n = 20, and the whole range seen below 9 (the 10th/90th percentiles of a few
    residuals cover well under 80 %: about 69 % at n = 20, 50 % or less at n = 3)."""
    n = len(sorted_values)
    lo = min(n, max(1, math.floor(0.1 * (n + 1))))
    hi = min(n, max(1, math.ceil(0.9 * (n + 1))))
    return sorted_values[lo - 1], sorted_values[hi - 1]


@dataclass(frozen=True, slots=True)
class Calibration:
    """One estimator's track record on one partition.

    `lo_s`/`mid_s`/`hi_s`: the 10th/50th/90th percentile of its residuals (observed minus
    predicted), so a new prediction P forecasts the band (P + lo_s, P + mid_s, P + hi_s).
    `scored`: jobs that had a band from earlier jobs; `covered`: those inside it."""

    n: int
    scored: int
    covered: int
    lo_s: float
    mid_s: float
    hi_s: float
    min_scored: int

    @property
    def coverage(self) -> float | None:
        """Share of scored jobs inside their p10-p90 band, or None below `min_scored`."""
        return self.covered / self.scored if self.scored >= self.min_scored else None

    @property
    def weight(self) -> float:
        """1 while coverage is unknown or at least 80 % - 10; below, its square share of that
        (a band holding 35 % of the time, half the 70 %: a quarter of the weight).
        A band that covers more than it claims is wide, not wrong (the conformal edges of a
        few residuals are their whole range): its estimator's errors are not growing."""
        c = self.coverage
        if c is None:
            return 1.0
        floor = TARGET_COVERAGE - TOLERANCE
        return 1.0 if c >= floor else max(MIN_WEIGHT, (c / floor) ** 2)

    def band(self, predicted_s: float) -> tuple[float, float, float]:
        """p10, p50, p90 of the quantity for a new prediction (never below 0)."""
        return (
            max(0.0, predicted_s + self.lo_s),
            max(0.0, predicted_s + self.mid_s),
            max(0.0, predicted_s + self.hi_s),
        )


def calibrate(
    pairs: Sequence[tuple[float, float]],
    *,
    min_samples: int,
    min_scored: int | None = None,
    window: int | None = None,
) -> Calibration:
    """`pairs`: (predicted, observed), oldest first. A job is scored once `min_samples`
    earlier jobs exist; coverage is reported from `min_scored` scored jobs (default
    `min_samples`). `window`: the band uses only the last `window` residuals (all by default;
    the daemon already keeps the most recent 20)."""
    need = max(1, min_samples)
    keep = len(pairs) if window is None else max(need, window)
    residuals: list[float] = []
    scored = covered = 0
    for predicted, observed in pairs:
        if len(residuals) >= need:
            low, high = band_edges(sorted(residuals[-keep:]))
            lo, hi = max(0.0, predicted + low), max(0.0, predicted + high)
            scored += 1
            covered += lo <= observed <= hi
        residuals.append(observed - predicted)
    ordered = sorted(residuals[-keep:]) or [0.0]
    lo_s, hi_s = band_edges(ordered)
    return Calibration(
        n=len(residuals),
        scored=scored,
        covered=covered,
        lo_s=lo_s,
        mid_s=quantile(ordered, 0.5),
        hi_s=hi_s,
        min_scored=need if min_scored is None else max(1, min_scored),
    )
