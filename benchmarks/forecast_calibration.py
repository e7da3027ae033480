"""Runtime forecast bands on a real job log (issue 42): how often each estimator's p10-p90 band
holds, and its median absolute error, replaying LCG.swf.gz (Parallel Workloads Archive; wait
times are not recorded in this log, so only runtimes can be judged).

Estimators, each forecasting a job's runtime at submit time from what was known then:
- `request`: the job's wall-time request (field 9);
- `history`: the median runtime of the same user's last 20 finished jobs on that partition
  with the same processor count (the task's own history, same shape), else the request.
Each job's band is the estimator's point plus the 10th/90th percentile of its last 20
residuals on the partition (placement.calibration, scored prequentially: never on the future).
A job's runtime is known to later forecasts only once it has ended (submit + run).

    .venv/bin/python benchmarks/forecast_calibration.py [../shared/traces/LCG.swf.gz] [--top 6]
"""

from __future__ import annotations

import argparse
import gzip
import heapq
import statistics
from collections import defaultdict, deque
from pathlib import Path

from fedhpc.placement.calibration import calibrate

TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "LCG.swf.gz"


def jobs(path: Path) -> list[tuple[int, int, int, int, int, int]]:
    """(submit, run, procs, requested_s, user, partition) of each job with a known run."""
    out = []
    with gzip.open(path, "rt") as f:
        for line in f:
            if line.startswith(";") or not line.strip():
                continue
            v = line.split()
            submit, run, procs, req = int(v[1]), int(v[3]), int(v[4]), int(v[8])
            if run < 0 or req <= 0:
                continue
            out.append((submit, run, procs, req, int(v[11]), int(v[15])))
    out.sort()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", nargs="?", type=Path, default=TRACE)
    ap.add_argument("--top", type=int, default=6, help="partitions with most jobs")
    args = ap.parse_args()
    all_jobs = jobs(args.trace)
    per_part: dict[int, int] = defaultdict(int)
    for j in all_jobs:
        per_part[j[5]] += 1
    top = set(sorted(per_part, key=lambda p: -per_part[p])[: args.top])
    pairs: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
    seen: dict[tuple[int, int, int], deque[int]] = defaultdict(lambda: deque(maxlen=20))
    ended: list[tuple[int, tuple[int, int, int], int]] = []  # (end, key, run)
    for submit, run, procs, req, user, part in all_jobs:
        while ended and ended[0][0] <= submit:
            _, key, r = heapq.heappop(ended)
            seen[key].append(r)
        key = (user, part, procs)
        if part in top:
            hist = seen.get(key)
            pairs[(part, "request")].append((float(req), float(run)))
            guess = statistics.median(hist) if hist else req
            pairs[(part, "history")].append((float(guess), float(run)))
        heapq.heappush(ended, (submit + run, key, run))
    print(f"{len(all_jobs)} jobs with a known runtime; the {args.top} busiest partitions")
    print("| partition | estimator | jobs | p10-p90 held | median abs error |")
    print("|---|---|---|---|---|")
    for (part, method), v in sorted(pairs.items()):
        cal = calibrate(v, min_samples=3, window=20)
        mae = statistics.median(abs(p - o) for p, o in v)
        cov = cal.coverage
        held = "-" if cov is None else f"{cov:.0%}"
        print(f"| {part} | {method} | {len(v)} | {held} | {mae:.0f} s |")
    for method in ("request", "history"):
        scored = covered = 0
        errs: list[float] = []
        for (_part, m), v in pairs.items():
            if m == method:
                c = calibrate(v, min_samples=3, window=20)
                scored, covered = scored + c.scored, covered + c.covered
                errs += [abs(p - o) for p, o in v]
        print(
            f"| all | {method} | {len(errs)} | {covered / max(scored, 1):.0%} "
            f"| {statistics.median(errs):.0f} s |"
        )


if __name__ == "__main__":
    main()
