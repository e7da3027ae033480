"""Would ranking by the bias-corrected scheduler forecast pick the fastest partition more often?

Replays matched_rounds.py runs from their CSVs (submits nothing). Each round's candidates carry
the scheduler's will-run wait at the round's snapshot (`predicted_scheduler_s`) and the wait
they then had (sacct Start - Eligible; a job cut at the round timeout, its lower bound). Two
rankings of the same candidates, the matched jobs being alike (same shape, same sleep):

- `raw`: the smallest predicted wait (bf-scheduler's and, where the scheduler answers, the
  daemon's);
- `corrected`: the smallest predicted wait plus the median of that partition's last <= 20
  residuals (realised - predicted) of earlier rounds, once 3 exist: the band's p50, as
  `placement.calibration` would centre it.

A pick is the fastest when its completion is within 1 s of the round's fastest finished job
(sacct's whole seconds), as matched_rounds.py counts it; rounds where every job was cut, or with
no scheduler answer, are left out. Prints one line per run and the rounds where the two differ.

    .venv/bin/python benchmarks/rank_replay.py benchmarks/results/matched_rounds*.csv
"""

from __future__ import annotations

import argparse
import csv
import statistics
from collections import defaultdict
from pathlib import Path

MIN_RESIDUALS, WINDOW = 3, 20
TIE_S = 1.0

Key = tuple[str, str]  # (site, partition)


def replay(path: Path) -> tuple[int, int, int, list[str]]:
    """(rounds scored, raw picks fastest, corrected picks fastest, the rounds they differ)."""
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    by_round: dict[int, list[dict[str, str]]] = defaultdict(list)
    for r in rows:
        by_round[int(r["round"])].append(r)
    residuals: dict[Key, list[float]] = defaultdict(list)
    scored = raw_hits = corrected_hits = 0
    differ: list[str] = []

    def corrected(r: dict[str, str]) -> float:
        predicted = float(r["predicted_scheduler_s"])
        seen = residuals[(r["site"], r["partition"])][-WINDOW:]
        if len(seen) < MIN_RESIDUALS:
            return predicted
        return max(0.0, predicted + statistics.median(seen))

    for n in sorted(by_round):
        jobs = by_round[n]
        answered = [r for r in jobs if r["predicted_scheduler_s"]]
        finished = [float(r["completion_s"]) for r in jobs if r["censored"] != "1"]
        if answered and finished:
            best = min(finished)
            done = {(r["site"], r["partition"]): float(r["completion_s"]) for r in jobs}
            a = min(answered, key=lambda r: float(r["predicted_scheduler_s"]))
            b = min(answered, key=corrected)
            ka, kb = (a["site"], a["partition"]), (b["site"], b["partition"])
            hit_a, hit_b = done[ka] - best <= TIE_S, done[kb] - best <= TIE_S
            scored += 1
            raw_hits += hit_a
            corrected_hits += hit_b
            if ka != kb:
                differ.append(
                    f"round {n}: raw {'/'.join(ka)} {'hit' if hit_a else 'miss'}, "
                    f"corrected {'/'.join(kb)} {'hit' if hit_b else 'miss'}"
                )
        for r in answered:  # learned after the round: the next rounds' corrections
            if r["wait_s"]:
                residuals[(r["site"], r["partition"])].append(
                    float(r["wait_s"]) - float(r["predicted_scheduler_s"])
                )
    return scored, raw_hits, corrected_hits, differ


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("csv", nargs="+", type=Path, help="matched_rounds.py result CSVs")
    ap.add_argument("--rounds", action="store_true", help="also list the rounds that differ")
    args = ap.parse_args()
    for path in args.csv:
        scored, raw, fixed, differ = replay(path)
        print(
            f"{path.name}: picked fastest, raw {raw}/{scored} ({raw / scored:.0%}), "
            f"corrected {fixed}/{scored} ({fixed / scored:.0%}); {len(differ)} rounds differ"
        )
        if args.rounds:
            for line in differ:
                print(f"  {line}")


if __name__ == "__main__":
    main()
