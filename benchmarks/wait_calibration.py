"""The wait-forecast calibration table of a matched_rounds.py run, per estimator and site.

Every matched job carries what each wait estimator predicted for its partition at the round's
snapshot (`scheduler`, `learned`, `paper`: the candidate's `wait_by` in bf-scheduler's trace);
sacct later gives the wait it had (Start - Eligible). Scored the way the daemon scores its own
placements (`fedhpc.placement.calibration.AdaptiveBand`): per (site, partition, estimator), job
i's p10-p90 band is its prediction shifted by the conformal edges of the residuals of the (at
most 20) jobs before it there, once 3 exist, at the level adaptive conformal inference reached
by then; coverage is the share of scored jobs inside their band (goal 80 % +- 10), next to the
coverage of the split conformal band used before (fixed level, cut jobs left out, a job that
started at once not yet taken as a wait at its floor: `calibration.FLOOR`). Bias is the
median of predicted - observed (positive: it predicts longer waits than happen); |error| the
median |predicted - observed| of the raw prediction, i.e. of the start-time forecast (snapshot
+ predicted wait), and of the band's p50. A job cut at the round timeout before it started has
only a lower bound on its wait: it counts as a miss when its band's p90 lies below that bound,
and is otherwise left out (`cut`); it never enters the errors, and its bound enters the
residuals (the wait was at least that).

    .venv/bin/python benchmarks/wait_calibration.py \
        --from-csv benchmarks/results/matched_rounds-trace.csv
"""

from __future__ import annotations

import csv
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedhpc.placement.calibration import GAMMA, AdaptiveBand

__all__ = ["METHODS", "CalibrationRow", "calibration_rows", "markdown", "write_csv"]

METHODS = ("scheduler", "learned", "paper")
MIN_SAMPLES = 3  # as the daemon's EstimatorErrors
WINDOW = 20  # the daemon keeps the most recent 20 per (site, partition, estimator)


@dataclass
class CalibrationRow:
    site: str
    partition: str  # "*" for a site's partitions together
    method: str
    n: int  # judged jobs (started; the wait known)
    cut: int  # never started before the round timeout, not known to miss their band
    scored: int
    covered: int
    bias_s: float
    abs_error_s: float
    p50_abs_error_s: float | None  # of the scored jobs' band p50
    # The same jobs under the band before it adapted (split conformal at a fixed 80 %, cut
    # jobs left out of the residuals), for comparison.
    split_scored: int = 0
    split_covered: int = 0

    @property
    def coverage(self) -> float | None:
        return self.covered / self.scored if self.scored else None

    @property
    def split_coverage(self) -> float | None:
        return self.split_covered / self.split_scored if self.split_scored else None


@dataclass
class _Acc:
    errors: list[float]  # predicted - observed
    p50_errors: list[float]
    scored: int = 0
    covered: int = 0
    cut: int = 0


def _score(jobs: Sequence[tuple[float, float, bool]], acc: _Acc, *, adaptive: bool) -> None:
    """Prequential: each job (predicted, observed, observed is only a lower bound) against the
    band from the jobs before it, oldest first, as the daemon builds it (`AdaptiveBand`;
    `adaptive` False: the split conformal band before it adapted)."""
    band = AdaptiveBand(
        min_samples=MIN_SAMPLES,
        window=WINDOW,
        gamma=GAMMA if adaptive else 0.0,
        learn_censored=adaptive,
    )
    for predicted, observed, cut in jobs:
        p50 = band.band(predicted)
        judged = band.observe(predicted, observed, censored=cut)
        if cut:  # waited at least `observed`: a known miss only when p90 is below it
            acc.scored += judged is not None
            acc.cut += judged is None
            continue
        if judged is not None and p50 is not None:
            acc.scored += 1
            acc.covered += judged
            acc.p50_errors.append(p50[1] - observed)
        acc.errors.append(predicted - observed)


def _row(site: str, partition: str, method: str, acc: _Acc, split: _Acc) -> CalibrationRow:
    e = acc.errors
    return CalibrationRow(
        site,
        partition,
        method,
        len(e),
        acc.cut,
        acc.scored,
        acc.covered,
        statistics.median(e) if e else float("nan"),
        statistics.median(abs(x) for x in e) if e else float("nan"),
        statistics.median(abs(x) for x in acc.p50_errors) if acc.p50_errors else None,
        split.scored,
        split.covered,
    )


def calibration_rows(rounds: Iterable[Any]) -> tuple[list[CalibrationRow], list[CalibrationRow]]:
    """(per site and partition, per site) rows for each estimator that predicted there, each
    with its coverage under the adaptive band and under the split conformal one."""
    jobs: dict[tuple[str, str, str], list[tuple[float, float, bool]]] = defaultdict(list)
    for r in sorted(rounds, key=lambda r: r.index):
        for job in r.jobs.values():
            if job.wait is None:
                continue
            for method, predicted in sorted(job.predicted.items()):
                key = (job.site, job.partition, method)
                jobs[key].append((predicted, max(0.0, job.wait), job.start is None))
    parts: list[CalibrationRow] = []
    sites: dict[tuple[str, str], tuple[_Acc, _Acc]] = {}
    for key in sorted(jobs):
        acc, split = _Acc([], []), _Acc([], [])
        _score(jobs[key], acc, adaptive=True)
        _score(jobs[key], split, adaptive=False)
        parts.append(_row(*key, acc, split))
        whole, whole_split = sites.setdefault((key[0], key[2]), (_Acc([], []), _Acc([], [])))
        for into, a in ((whole, acc), (whole_split, split)):
            into.errors += a.errors
            into.p50_errors += a.p50_errors
            into.scored += a.scored
            into.covered += a.covered
            into.cut += a.cut
    per_site = [_row(s, "*", m, *a) for (s, m), a in sorted(sites.items())]
    return parts, per_site


def _share(covered: int, scored: int) -> str:
    return "-" if not scored else f"{covered / scored * 100:.0f} % of {scored}"


def _cells(r: CalibrationRow) -> list[str]:
    cov = _share(r.covered, r.scored)
    split = _share(r.split_covered, r.split_scored)
    p50 = "-" if r.p50_abs_error_s is None else f"{r.p50_abs_error_s:.0f} s"
    bias, err = ("-", "-") if not r.n else (f"{r.bias_s:+.0f} s", f"{r.abs_error_s:.0f} s")
    return [r.site, r.partition, r.method, str(r.n), str(r.cut), cov, split, bias, err, p50]


HEAD = (
    "| site | partition | estimator | judged | cut | p10-p90 coverage (adaptive) "
    "| split conformal (before) | bias | median abs error | median abs error of p50 |"
)


def markdown(
    parts: Sequence[CalibrationRow], per_site: Sequence[CalibrationRow], *, min_rows: int = 5
) -> list[str]:
    """Per site, then the partitions with at least `min_rows` judged jobs."""
    rule = "|" + "---|" * 10
    lines = [HEAD, rule, *("| " + " | ".join(_cells(r)) + " |" for r in per_site)]
    many = [r for r in parts if r.n >= min_rows]
    if many:
        lines += ["", f"Per partition (those with ≥ {min_rows} judged jobs):", "", HEAD, rule]
        lines += ["| " + " | ".join(_cells(r)) + " |" for r in many]
    return lines


def write_csv(
    path: Path, parts: Sequence[CalibrationRow], per_site: Sequence[CalibrationRow]
) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            [
                "site",
                "partition",
                "estimator",
                "judged",
                "cut",
                "scored",
                "covered",
                "coverage",
                "split_scored",
                "split_covered",
                "median_bias_s",
                "median_abs_error_s",
                "median_abs_error_p50_s",
            ]
        )
        for r in [*per_site, *parts]:
            cov = "" if r.coverage is None else round(r.coverage, 3)
            p50 = "" if r.p50_abs_error_s is None else round(r.p50_abs_error_s, 1)
            bias, err = ("", "") if not r.n else (round(r.bias_s, 1), round(r.abs_error_s, 1))
            w.writerow(
                [
                    r.site,
                    r.partition,
                    r.method,
                    r.n,
                    r.cut,
                    r.scored,
                    r.covered,
                    cov,
                    r.split_scored,
                    r.split_covered,
                    bias,
                    err,
                    p50,
                ]
            )
    return path


def main() -> None:
    # matched_rounds imports this module: imported here, where it is used, not at the top.
    import argparse

    from matched_rounds import RESULTS, rounds_from_csv

    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--from-csv", type=Path, required=True, help="a matched_rounds.py run's CSV")
    args = ap.parse_args()
    rounds, _, _ = rounds_from_csv(args.from_csv)
    parts, per_site = calibration_rows(rounds)
    stem = args.from_csv.stem.removeprefix("matched_rounds")
    print(f"wrote {write_csv(RESULTS / f'wait_calibration{stem}.csv', parts, per_site)}")
    print("\n".join(markdown(parts, per_site)))


if __name__ == "__main__":
    main()
