"""benchmarks/rank_replay.py: the raw and the bias-corrected scheduler rankings of matched rounds,
replayed from a CSV, each judged as matched_rounds.py judges a pick (within 1 s of the fastest)."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from rank_replay import replay

FIELDS = (
    "round",
    "site",
    "partition",
    "predicted_scheduler_s",
    "wait_s",
    "completion_s",
    "censored",
)


def _csv(path: Path, rounds: list[list[tuple[str, float, float, float, bool]]]) -> Path:
    """Rounds of (partition, predicted wait, wait, completion, cut), on site `s`."""
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, FIELDS)
        w.writeheader()
        for n, jobs in enumerate(rounds):
            for part, predicted, wait, done, cut in jobs:
                w.writerow(
                    {
                        "round": n,
                        "site": "s",
                        "partition": part,
                        "predicted_scheduler_s": predicted,
                        "wait_s": wait,
                        "completion_s": done,
                        "censored": "1" if cut else "0",
                    }
                )
    return path


def test_a_partition_whose_answers_run_late_wins_once_its_residuals_say_so(tmp_path: Path) -> None:
    # `far` always answers 1,000 s and starts the job in 10 s; `near` answers 100 s and takes 60.
    rounds = [[("far", 1000.0, 10.0, 20.0, False), ("near", 100.0, 60.0, 70.0, False)]] * 5
    scored, raw, corrected, differ = replay(_csv(tmp_path / "r.csv", rounds))
    assert (scored, raw, corrected) == (5, 0, 2)  # corrected from the 4th round on (3 residuals)
    assert differ == [f"round {n}: raw s/near miss, corrected s/far hit" for n in (3, 4)]


def test_a_correction_that_reorders_a_right_order_costs_the_pick(tmp_path: Path) -> None:
    # `a` answered 10 s and waited 160 s three times; this round it is the faster one again.
    history = [[("a", 10.0, 160.0, 170.0, False), ("b", 100.0, 100.0, 110.0, False)]] * 3
    now = [[("a", 10.0, 0.0, 10.0, False), ("b", 100.0, 95.0, 95.0, True)]]
    scored, raw, corrected, differ = replay(_csv(tmp_path / "r.csv", history + now))
    assert (scored, raw, corrected) == (4, 1, 0)
    assert differ == ["round 3: raw s/a hit, corrected s/b miss"]
    cut_all = [[("a", 5.0, 90.0, 90.0, True), ("b", 9.0, 90.0, 90.0, True)]]
    assert replay(_csv(tmp_path / "c.csv", cut_all))[0] == 0  # nothing finished: not scored
