"""How well an estimator's forecasts hold, judged the way they would have been used (pure).

Each placed job recorded what an estimator predicted; accounting later reports what happened.
The residuals (observed - predicted) of an estimator's earlier jobs give its forecast band for
the next one: p10/p90 = predicted + the residuals' conformal edges (`band_edges`), p50 =
predicted + their median (the QBETS idea: an empirical bound with a stated confidence, from
the estimator's own track record).
The edges' level adapts (adaptive conformal inference, Gibbs & Candès 2021): after every
judged job the miscoverage level moves by alpha_t+1 = alpha_t + GAMMA (0.2 - err_t), err_t = 1
on a miss, so a run of misses (the queue changed regime: residuals no longer exchangeable)
widens the band toward the whole range seen, and a band that holds too often narrows back.
A job cut before it started has only a lower bound on its wait: a known miss when the band's
p90 is below it, otherwise unjudged; either way the bound enters the residuals (the wait was
at least that), so a partition that fills teaches the band before its jobs start.
A job that started at once (a wait of 0 s) is censored the other way: the partition had room
before it came, so its wait says nothing of how far the estimator overshot, only that the wait
was at its floor. Its residual is `FLOOR` (-inf), not -predicted: otherwise a prediction that
drifts up while the jobs keep starting at once lifts the band's p10 above the 0 s the waits
showed. When the band's lower edge falls on the floor (a tenth of the residuals; one of
fewer than 19) its p10 is 0 s whatever the prediction, and the band puts all its miscoverage
above (`band_edges`): an equal-tailed band whose lower tail is at 0 s covers up to 90 %, not
the 80 % it claims (87 % when a third of the jobs start at once: `test_placement_calibration`).
Calibration is scored *prequentially*: job i is judged against the band built from jobs
before it only, so coverage is what a caller relying on the band would have seen. A well
calibrated p10-p90 band covers 80 % of jobs; an estimator whose coverage drifts below
80 % - 10 loses weight (`weight` < 1), which `EstimatorErrors.prefer` divides its error by.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "FLOOR",
    "GAMMA",
    "TARGET_COVERAGE",
    "TOLERANCE",
    "AdaptiveBand",
    "Calibration",
    "band_edges",
    "calibrate",
    "quantile",
]

TARGET_COVERAGE = 0.8  # the p10-p90 band
TOLERANCE = 0.1  # coverage of at least 80 % - 10 keeps full weight
MIN_WEIGHT = 0.1
# ACI's step: five misses in a row take the level from 0.2 to 0 (the whole range seen), 20
# hits in a row from 0.2 to 0.4. Gibbs & Candès use 0.005 on series of thousands; the daemon
# judges a band on its last 20 jobs, so the level must move within a handful.
GAMMA = 0.04
MAX_ALPHA = 0.5  # never narrower than the residuals' quartiles
FLOOR = -math.inf  # the residual of a job that started at once (see the module's doc)


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of an ascending, non-empty sequence; between `FLOOR` and a
    finite value, the value of the nearer rank (the floor when halfway)."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    a, b = sorted_values[lo], sorted_values[hi]
    if math.isinf(a):
        return a if a == b or pos - lo <= 0.5 else b
    return a + (b - a) * (pos - lo)


def band_edges(
    sorted_values: Sequence[float], alpha: float = 1 - TARGET_COVERAGE
) -> tuple[float, float]:
    """The band's edges from n ascending residuals at miscoverage `alpha`, as split conformal
    prediction takes them: the order statistics of rank floor(alpha/2 (n+1)) and
    ceil((1 - alpha/2) (n+1)), held to 1..n. A new exchangeable residual then falls inside
    with probability (hi - lo)/(n+1): 81 % at n = 20 and alpha 0.2, and the whole range seen
    below 9 (the 10th/90th percentiles of a few residuals cover well under 80 %: about 69 %
    at n = 20, 50 % or less at n = 3).
    A lower edge at `FLOOR` (jobs that started at once: p10 is 0 s) costs the band no
    miscoverage below, so its upper edge takes all of it, rank ceil((1 - alpha) (n+1)): the
    band then covers 80 %, where the equal-tailed one would cover 90 %."""
    n = len(sorted_values)
    lo = min(n, max(1, math.floor(alpha / 2 * (n + 1))))
    hi = min(n, max(1, math.ceil((1 - alpha / 2) * (n + 1))))
    if sorted_values[lo - 1] == FLOOR:
        hi = min(n, max(1, math.ceil((1 - alpha) * (n + 1))))
    return sorted_values[lo - 1], sorted_values[hi - 1]


class AdaptiveBand:
    """One estimator's band on one partition, fed its jobs oldest first (prequential: `band`
    before `observe` is what a caller had when the job was placed)."""

    def __init__(
        self,
        *,
        min_samples: int,
        window: int | None = None,
        gamma: float = GAMMA,
        learn_censored: bool = True,
    ) -> None:
        """`gamma` 0 and `learn_censored` False: split conformal at a fixed 80 %, cut jobs
        left out of the residuals and jobs that started at once taken as residuals like any
        other (the band before it adapted; benchmarks compare the two)."""
        self.need = max(1, min_samples)
        self.window = window
        self.gamma = gamma
        self.learn_censored = learn_censored
        self.alpha = 1 - TARGET_COVERAGE
        self.residuals: list[float] = []

    def _recent(self) -> list[float]:
        keep = self.residuals if self.window is None else self.residuals[-self.window :]
        return sorted(keep)

    def offsets(self) -> tuple[float, float, float]:
        """(p10, p50, p90) residual offsets at the current level (0s before any residual)."""
        past = self._recent() or [0.0]
        lo, hi = band_edges(past, self.alpha)
        return lo, quantile(past, 0.5), hi

    def band(self, predicted_s: float) -> tuple[float, float, float] | None:
        """p10, p50, p90 of the quantity for a new prediction (never below 0); None below
        `min_samples` residuals."""
        return None if len(self.residuals) < self.need else _shift(predicted_s, self.offsets())

    def observe(
        self, predicted_s: float, observed_s: float, *, censored: bool = False
    ) -> bool | None:
        """Judge the job against the current band and learn its residual. True/False: inside /
        outside; None: not judged (no band yet, or cut with its p90 above the lower bound)."""
        band = self.band(predicted_s)
        judged: bool | None = None
        if band is not None and not (censored and band[2] >= observed_s):
            judged = not censored and band[0] <= observed_s <= band[2]
            miss = 0.0 if judged else 1.0
            a = self.alpha + self.gamma * (1 - TARGET_COVERAGE - miss)
            self.alpha = min(MAX_ALPHA, max(0.0, a))
        if not censored:
            at_once = observed_s <= 0 and self.learn_censored
            self.residuals.append(FLOOR if at_once else observed_s - predicted_s)
        elif self.learn_censored:
            self.residuals.append(observed_s - predicted_s)
        return judged


def _shift(predicted_s: float, off: tuple[float, float, float]) -> tuple[float, float, float]:
    lo, mid, hi = off
    return max(0.0, predicted_s + lo), max(0.0, predicted_s + mid), max(0.0, predicted_s + hi)


@dataclass(frozen=True, slots=True)
class Calibration:
    """One estimator's track record on one partition.

    `lo_s`/`mid_s`/`hi_s`: the band's offsets from its residuals (observed minus predicted)
    at the adapted level `alpha` (the p10/p90 edges) and their median, so a new prediction P
    forecasts (P + lo_s, P + mid_s, P + hi_s), none below 0 s; an offset at `FLOOR` (-inf:
    enough jobs started at once) puts that edge at 0 s. `scored`: jobs that had a band from
    earlier jobs; `covered`: those inside it."""

    n: int
    scored: int
    covered: int
    lo_s: float
    mid_s: float
    hi_s: float
    min_scored: int
    alpha: float = 1 - TARGET_COVERAGE

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
        return _shift(predicted_s, (self.lo_s, self.mid_s, self.hi_s))


def calibrate(
    pairs: Sequence[tuple[float, float]],
    *,
    min_samples: int,
    min_scored: int | None = None,
    window: int | None = None,
    gamma: float = GAMMA,
) -> Calibration:
    """`pairs`: (predicted, observed), oldest first. A job is scored once `min_samples`
    earlier jobs exist; coverage is reported from `min_scored` scored jobs (default
    `min_samples`). `window`: the band uses only the last `window` residuals (all by default;
    the daemon already keeps the most recent 20). `gamma` 0: split conformal, no adaptation."""
    acc = AdaptiveBand(min_samples=min_samples, window=window, gamma=gamma)
    scored = covered = 0
    for predicted, observed in pairs:
        judged = acc.observe(predicted, observed)
        scored += judged is not None
        covered += judged is True
    lo_s, mid_s, hi_s = acc.offsets()
    return Calibration(
        n=len(acc.residuals),
        scored=scored,
        covered=covered,
        lo_s=lo_s,
        mid_s=mid_s,
        hi_s=hi_s,
        min_scored=acc.need if min_scored is None else max(1, min_scored),
        alpha=acc.alpha,
    )
