"""Instructions per placement decision and per group child, counted by valgrind (callgrind):
unlike wall-clock time on this machine, which drifts by a third within seconds, a count
repeats to within about a percent, so two commits can be compared on the same workload.

Each workload runs twice under callgrind, with `k1` and `k2` decisions (or children); the
difference divided by `k2 - k1` is the marginal cost of one, without start-up, imports and
the snapshot's one-off index. Workloads are those of `placement.py`:

- decision-7: one placement at the 7-site federation (its five envelopes, three policies)
- decision-50: one placement at 50 sites x 20 partitions (10k queued jobs, 10k observations)
- decision-50-placed: the same without the envelope nothing can run (it scores every partition)
- child-7, child-50: one child of a 1,000-child group

Run: .venv/bin/python benchmarks/instructions.py [--src DIR] [workload ...]
     (--src: the `src` folder of another checkout, e.g. from `git archive REV | tar -x`)
Needs valgrind (apt-get install valgrind). Slow: about a minute per workload.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
# workload -> (sites, first count, second count)
WORKLOADS: dict[str, tuple[int, int, int]] = {
    "decision-7": (7, 100, 300),
    "decision-50": (50, 30, 90),
    "decision-50-placed": (50, 30, 90),
    "child-7": (7, 200, 1000),
    "child-50": (50, 200, 1000),
}


def inner(workload: str, k: int) -> None:
    sys.path.insert(0, str(HERE))
    # Here, not at the top: only the child under valgrind needs placement (and the fedhpc
    # it imports, from --src); the parent only runs valgrind.
    import placement as bench

    n = WORKLOADS[workload][0]
    sites = bench.federation() if n == 7 else bench.scaled_federation(n)
    kw: dict[str, int] = {} if n == 7 else {"queued": 10_000, "observations": 10_000}
    if workload == "decision-50-placed":
        bench.ENVELOPES = bench.ENVELOPES[:4]  # the fifth asks for 200 GiB accelerators
    bench.bench_tasks(10, 8, sites, snapshots=2, **kw)  # warm-up: imports, caches
    if workload.startswith("decision"):
        bench.bench_tasks(k, 7, sites, snapshots=3, **kw)
    else:
        bench.bench_group(k, 7, sites, **kw)


def count(src: Path, workload: str, k: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        env = {**os.environ, "PYTHONPATH": str(src), "PYTHONHASHSEED": "0"}
        cmd = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            sys.executable,
            str(Path(__file__).resolve()),
            "--inner",
            workload,
            str(k),
        ]
        run = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    found = re.search(r"Collected\s*:\s*(\d+)", run.stderr)
    if found is None:
        raise SystemExit(f"no instruction count from valgrind:\n{run.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("workloads", nargs="*", default=list(WORKLOADS))
    ap.add_argument("--src", type=Path, default=HERE.parent / "src")
    ap.add_argument("--inner", nargs=2, metavar=("WORKLOAD", "K"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inner:
        inner(args.inner[0], int(args.inner[1]))
        return
    print(f"source: {args.src.resolve()}")
    print("| workload | instructions per unit |")
    print("|---|---:|")
    for w in args.workloads:
        _, k1, k2 = WORKLOADS[w]
        per = (count(args.src, w, k2) - count(args.src, w, k1)) / (k2 - k1)
        print(f"| {w} | {per / 1e6:.3f} M |", flush=True)


if __name__ == "__main__":
    main()
