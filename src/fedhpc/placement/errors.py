"""Estimators judged by their errors: each placed job's predicted waits (one per estimator) set
against the wait the scheduler's accounting later reports, per site and partition (pure)."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fedhpc.placement.calibration import Calibration, calibrate

__all__ = ["ErrorObservation", "EstimatorError", "EstimatorErrors", "method_of"]


@dataclass(frozen=True, slots=True)
class ErrorObservation:
    """One job: what an estimator predicted its queue wait to be, and what it was."""

    site: str
    partition: str
    method: str  # "scheduler" | "learned" | "paper"
    predicted_s: float
    observed_s: float
    at: datetime  # when the wait was observed (the job started)


@dataclass(frozen=True, slots=True)
class EstimatorError:
    """An estimator's recent error on one partition: median |predicted - observed| and the
    median signed error (positive: it predicts longer waits than happen)."""

    site: str
    partition: str
    method: str
    n: int
    median_abs_s: float
    median_bias_s: float
    # The p10-p90 band from its residuals and how often it held (placement.calibration).
    calibration: Calibration | None = None

    @property
    def weight(self) -> float:
        return self.calibration.weight if self.calibration is not None else 1.0


class EstimatorErrors:
    """The most recent `recent` observations per (site, partition, estimator) inside the window
    before `now`; later ones are ignored (replayable)."""

    def __init__(
        self,
        observations: Iterable[ErrorObservation],
        *,
        now: datetime,
        window_s: float,
        recent: int = 20,
        min_samples: int = 3,
    ) -> None:
        self.min_samples = min_samples
        oldest = now.timestamp() - window_s
        keep = [o for o in observations if oldest <= o.at.timestamp() <= now.timestamp()]
        keep.sort(key=lambda o: o.at, reverse=True)
        by: dict[tuple[str, str, str], list[tuple[float, float]]] = defaultdict(list)
        for o in keep:
            key = (o.site, o.partition, o.method)
            if len(by[key]) < recent:
                by[key].append((o.predicted_s, o.observed_s))
        # Per partition, its newest judged jobs (one per job: each estimator's prediction
        # beside the wait that happened), for a picture of predicted against realised waits.
        self._judged: dict[tuple[str, str], dict[tuple[datetime, float], dict[str, Any]]] = {}
        for o in keep:
            jobs = self._judged.setdefault((o.site, o.partition), {})
            job = (o.at, o.observed_s)
            if job not in jobs and len(jobs) >= recent:
                continue
            row = jobs.setdefault(job, {"at": o.at, "observed_s": o.observed_s, "predicted_s": {}})
            row["predicted_s"][o.method] = o.predicted_s
        self._errors = {}
        for k, v in by.items():
            e = [p - w for p, w in v]
            cal = calibrate(v[::-1], min_samples=min_samples)  # oldest first
            self._errors[k] = EstimatorError(
                *k, len(e), statistics.median(abs(x) for x in e), statistics.median(e), cal
            )

    def get(self, site: str, partition: str, method: str) -> EstimatorError | None:
        """The estimator's recent error there, or None below `min_samples` observations."""
        e = self._errors.get((site, partition, method))
        return e if e is not None and e.n >= self.min_samples else None

    def prefer(self, site: str, partition: str, first: str, second: str) -> str | None:
        """Why `second` should be used instead of `first` there (its recent error, divided by
        its calibration weight, is smaller), or None when `first` is at least as good or either
        lacks enough observations."""
        a, b = self.get(site, partition, first), self.get(site, partition, second)
        if a is None or b is None or b.median_abs_s / b.weight >= a.median_abs_s / a.weight:
            return None
        return (
            f"{second} preferred: recent error {b.median_abs_s:.0f} s vs {first} "
            f"{a.median_abs_s:.0f} s (n={b.n}/{a.n})"
        )

    def rows(self) -> list[EstimatorError]:
        return [self._errors[k] for k in sorted(self._errors)]

    def auto_prefers(self, e: EstimatorError) -> bool:
        """Whether `auto` uses this estimator on its partition (placement.estimators.choose):
        the scheduler first whenever it answers; without it paper where `prefer` says so, and
        learned where both were judged on `min_samples` jobs and paper is not better. Below
        `min_samples` the errors say nothing: False."""
        if e.method == "scheduler":
            return True
        s, p = e.site, e.partition
        if self.get(s, p, "learned") is None or self.get(s, p, "paper") is None:
            return False
        paper_better = self.prefer(s, p, "learned", "paper") is not None
        return paper_better if e.method == "paper" else e.method == "learned" and not paper_better

    def as_rows(self) -> list[dict[str, Any]]:
        """The rows of `GET /v1/estimators`: errors rounded to 0.1 s, `auto_prefers` decided
        on the unrounded ones."""
        return [
            {
                "site": e.site,
                "partition": e.partition,
                "method": e.method,
                "n": e.n,
                "median_abs_error_s": round(e.median_abs_s, 1),
                "median_bias_s": round(e.median_bias_s, 1),
                "auto_prefers": self.auto_prefers(e),
                **_calibration_fields(e.calibration),
            }
            for e in self.rows()
        ]

    def judged(self) -> list[dict[str, Any]]:
        """The newest judged jobs per site and partition (at most `recent` each), oldest first:
        when each started, the wait it had and each estimator's prediction (0.1 s)."""
        return [
            {
                "site": site,
                "partition": partition,
                "at": j["at"].isoformat(),
                "observed_s": round(j["observed_s"], 1),
                "predicted_s": {m: round(v, 1) for m, v in sorted(j["predicted_s"].items())},
            }
            for (site, partition), jobs in sorted(self._judged.items())
            for j in sorted(jobs.values(), key=lambda j: j["at"])
        ]

    def band(
        self, site: str, partition: str, method: str, predicted_s: float
    ) -> tuple[float, float, float] | None:
        """p10/p50/p90 for a new prediction from this estimator's recent residuals there, or
        None below `min_samples` observations."""
        e = self.get(site, partition, method)
        if e is None or e.calibration is None:
            return None
        return e.calibration.band(predicted_s)


def method_of(source: str) -> str:
    """The estimator a wait's source names: "scheduler:free-now" -> "scheduler"."""
    return source.split(";", 1)[0].split(":", 1)[0].strip()


def _calibration_fields(c: Calibration | None) -> dict[str, Any]:
    """`coverage`: share of jobs inside the p10-p90 band built from the jobs before them (None
    until enough were scored; goal 0.8); `band_s`: the residual p10/p50/p90 a new prediction
    is shifted by, None where that edge is at the floor (enough jobs started at once: 0 s
    whatever the prediction; placement.calibration.FLOOR); `weight`: 1 within 0.8 +- 0.1,
    less the further coverage drifts; `alpha`: the band's miscoverage level as its misses and
    hits moved it (0.2 at first)."""
    if c is None:
        return {}
    cov = c.coverage
    return {
        "coverage": None if cov is None else round(cov, 2),
        "scored": c.scored,
        "band_s": [None if math.isinf(x) else round(x, 1) for x in (c.lo_s, c.mid_s, c.hi_s)],
        "weight": round(c.weight, 2),
        "alpha": round(c.alpha, 3),
    }
