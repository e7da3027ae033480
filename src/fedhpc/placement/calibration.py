"""How well an estimator's forecasts hold, judged the way they would have been used (pure).

Each placed job recorded what an estimator predicted; accounting later reports what happened.
The residuals (observed - predicted) of an estimator's earlier jobs give its forecast band for
the next one: p10/p50/p90 = predicted + the residuals' 10th/50th/90th percentiles (the QBETS
idea: an empirical bound with a stated confidence, from the estimator's own track record).
Calibration is scored *prequentially*: job i is judged against the band built from jobs
before it only, so coverage is what a caller relying on the band would have seen. A well
calibrated p10-p90 band covers 80 % of jobs; an estimator whose coverage drifts outside
80 % +- 10 loses weight (`weight` < 1), which `EstimatorErrors.prefer` divides its error by.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["TARGET_COVERAGE", "TOLERANCE", "Calibration", "calibrate", "quantile"]

TARGET_COVERAGE = 0.8  # the p10-p90 band
TOLERANCE = 0.1  # coverage inside 80 % +- 10 keeps full weight
MIN_WEIGHT = 0.1


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of an ascending, non-empty sequence."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


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
        """1 while coverage is unknown or within 80 % +- 10; less the further it drifts."""
        c = self.coverage
        if c is None:
            return 1.0
        drift = max(0.0, abs(c - TARGET_COVERAGE) - TOLERANCE)
        return max(MIN_WEIGHT, 1.0 - drift / TARGET_COVERAGE)

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
            past = sorted(residuals[-keep:])
            lo = max(0.0, predicted + quantile(past, 0.1))
            hi = max(0.0, predicted + quantile(past, 0.9))
            scored += 1
            covered += lo <= observed <= hi
        residuals.append(observed - predicted)
    ordered = sorted(residuals[-keep:]) or [0.0]
    return Calibration(
        n=len(residuals),
        scored=scored,
        covered=covered,
        lo_s=quantile(ordered, 0.1),
        mid_s=quantile(ordered, 0.5),
        hi_s=quantile(ordered, 0.9),
        min_scored=need if min_scored is None else max(1, min_scored),
    )
