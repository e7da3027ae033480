"""benchmarks/wait_calibration.py, the calibration table of matched_rounds.py: each matched job
judged against the band its partition's earlier jobs give, as the daemon builds it."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from wait_calibration import calibration_rows, markdown


@dataclass
class _Job:
    site: str
    partition: str
    wait: float | None
    predicted: dict[str, float]
    start: object | None = "started"
    censored: bool = False


@dataclass
class _Round:
    index: int
    jobs: dict[str, _Job] = field(default_factory=dict)


def _rounds(waits: Sequence[tuple[float, bool]], predicted: float = 10.0) -> list[_Round]:
    """One job a round on alpha/p: (wait, cut before it started)."""
    out = []
    for i, (w, cut) in enumerate(waits):
        job = _Job("alpha", "p", w, {"paper": predicted}, None if cut else "started", cut)
        out.append(_Round(i, {"alpha/p": job}))
    return out


def test_a_job_is_judged_against_the_band_of_the_jobs_before_it_only() -> None:
    # Residuals -9, -9, -9 give the band [1, 1]: the 4th job (wait 1) is inside, the 5th
    # (wait 50) outside; the 5th's own residual never widened its band.
    parts, per_site = calibration_rows(_rounds([(1, False)] * 4 + [(50, False)]))
    (row,) = parts
    assert (row.n, row.scored, row.covered, row.cut) == (5, 2, 1, 0)
    assert row.coverage == 0.5
    assert row.bias_s == 9.0  # median of predicted - observed: 10 - 1
    assert per_site[0].partition == "*"
    assert per_site[0].coverage == 0.5


def test_a_job_cut_before_it_started_is_a_miss_only_when_its_p90_is_below_the_cutoff() -> None:
    below = calibration_rows(_rounds([(1, False)] * 3 + [(90, True)]))[0][0]
    assert (below.n, below.scored, below.covered, below.cut) == (3, 1, 0, 0)
    unknown = calibration_rows(_rounds([(100, False)] * 3 + [(90, True)]))[0][0]
    assert (unknown.scored, unknown.cut) == (0, 1)  # p90 = 100 s: it may still have held


def test_the_table_lists_sites_then_partitions_with_enough_jobs() -> None:
    parts, per_site = calibration_rows(_rounds([(1, False)] * 5))
    lines = markdown(parts, per_site, min_rows=5)
    assert lines[2].startswith("| alpha | * | paper | 5 | 0 | 100 % of 2 |")
    assert any(line.startswith("| alpha | p | paper | 5 |") for line in lines)
    assert not any("| p |" in line for line in markdown(parts, per_site, min_rows=6))


def test_a_cut_jobs_lower_bound_teaches_the_adaptive_band_not_the_split_one() -> None:
    # Three waits of 1 s (the band a point), one job cut at 90 s (a known miss for both),
    # then a wait of 80 s: inside the adaptive band (it learned "at least 90 s"), outside the
    # split conformal one (cut jobs left out of its residuals).
    (row,) = calibration_rows(_rounds([(1, False)] * 3 + [(90, True), (80, False)]))[0]
    assert (row.scored, row.covered) == (2, 1)
    assert (row.split_scored, row.split_covered) == (2, 0)
    line = markdown([row], [row], min_rows=99)[2]
    assert line.startswith("| alpha | p | paper | 4 | 0 | 50 % of 2 | 0 % of 2 |")
