"""A background load replayed from a real job log (issue 42): the LCG grid's log (CERN, Nov-Dec
2005, Parallel Workloads Archive, Standard Workload Format; `../shared/traces/LCG.swf.gz`)
replayed per partition on the local federation, with time compression.

Each of LCG's eight busiest partitions is replayed onto one devfed partition (`MAP`): its jobs
arrive in the log's order with the log's gaps and run (`sleep`) for the log's run times, both
divided by `compress` (default 60: a logged hour is a minute here); run times are clipped to
5-400 s after compression. LCG's jobs are single-processor grid jobs, so each replayed job takes
a fixed slice of a node: 16 CPUs on a CPU partition, 1 GPU (2 on gpuA40x4) on a GPU partition.
While `max_pending` jobs already wait in a partition its arrivals are skipped (the log's clock
goes on): a small devfed partition is not buried under a grid site's whole queue. The replay
starts `offset_h` hours into the log (default 24: past the first day's ramp-up) and wraps round.

`TraceLoad` has `LoadGenerator`'s interface (start, stop, job_ids, errors, submitted), so
`matched_rounds.py --load trace` uses it as it uses the synthetic loads.

Run alone: .venv/bin/python benchmarks/trace_load.py [--duration 300] [--compress 60]
"""

from __future__ import annotations

import argparse
import gzip
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from loadgen import LoadGenerator, Stream

from fedhpc.adapters.site import open_adapter
from fedhpc.profiles import load_federation

TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "LCG.swf.gz"
# LCG partition -> (devfed site, partition, cpus per job, gpus per job)
MAP: dict[int, tuple[str, str, int, int]] = {
    40: ("devdelta", "cpu", 16, 0),
    52: ("devanvil", "shared", 16, 0),
    12: ("devdelta", "gpuA100x4", 8, 1),
    41: ("devdeltaai", "ghx4", 8, 1),
    29: ("devvista", "gh", 8, 1),
    8: ("devanvil", "ai", 8, 1),
    156: ("devdelta", "gpuA40x4", 8, 2),
    3: ("devvista", "gg", 16, 0),
}
RUN_S = (5.0, 400.0)  # compressed run time, clipped


def read_trace(path: Path, partitions: set[int]) -> dict[int, list[tuple[int, int]]]:
    """(submit, run) of each job of `partitions` with a known run time, by partition, in
    submit order (SWF fields 2, 4 and 16)."""
    out: dict[int, list[tuple[int, int]]] = defaultdict(list)
    with gzip.open(path, "rt") as f:
        for line in f:
            if line.startswith(";") or not line.strip():
                continue
            v = line.split()
            part, run = int(v[15]), int(v[3])
            if part in partitions and run >= 0:
                out[part].append((int(v[1]), run))
    for jobs in out.values():
        jobs.sort()
    return dict(out)


@dataclass
class TraceLoad(LoadGenerator):
    """LCG's log replayed per partition (see the module doc)."""

    compress: float = 60.0
    offset_h: float = 24.0
    max_pending: int = 6
    path: Path = TRACE
    replayed: int = 0
    skipped: int = 0
    streams: tuple[Stream, ...] = field(
        default_factory=lambda: tuple(
            Stream(site, part, 0.0, ((c, g),), RUN_S, 0, gpu=g > 0)
            for site, part, c, g in MAP.values()
        )
    )

    async def _run(self) -> None:
        sites = load_federation()
        wanted = {site for site, *_ in MAP.values()}
        ads = {n: open_adapter(s) for n, s in sites.items() if n in wanted}
        log = read_trace(self.path, set(MAP))
        start = min(j[0] for jobs in log.values() for j in jobs) + self.offset_h * 3600
        # Per partition: its jobs from the offset on, as (seconds after the offset, run).
        queues = {
            p: [(s - start, r) for s, r in jobs if s >= start]
            or [(s - jobs[0][0], r) for s, r in jobs]
            for p, jobs in log.items()
        }
        span = {p: max(1.0, q[-1][0]) for p, q in queues.items()}
        nxt = dict.fromkeys(queues, 0)  # index of each partition's next job
        laps = dict.fromkeys(queues, 0)  # times each partition's log wrapped round
        counters: dict[int, int] = defaultdict(int)
        self.scale = 1.0  # compression already shortens the jobs
        try:
            self._ready.set()
            t0 = time.monotonic()
            while not self._stop.is_set():
                now = (time.monotonic() - t0) * self.compress  # the log's clock
                due: list[tuple[int, int]] = []
                for p, q in queues.items():
                    while q[nxt[p]][0] + laps[p] * span[p] <= now:
                        due.append((p, q[nxt[p]][1]))
                        nxt[p] += 1
                        if nxt[p] == len(q):
                            nxt[p], laps[p] = 0, laps[p] + 1
                pending = await self._pending(ads, {MAP[p][0] for p, _ in due})
                for p, run in due:
                    site, part, cpus, gpus = MAP[p]
                    if site not in ads or pending.get((site, part), 0) >= self.max_pending:
                        self.skipped += 1
                        continue
                    pending[(site, part)] = pending.get((site, part), 0) + 1
                    counters[p] += 1
                    stream = next(s for s in self.streams if (s.site, s.partition) == (site, part))
                    dur = min(max(run / self.compress, RUN_S[0]), RUN_S[1])
                    await self._submit(
                        ads[site], stream, counters[p], cpus=cpus, gpus=gpus, dur=dur
                    )
                    self.replayed += 1
                await anyio.sleep(self.tick_s)
        finally:
            self._ready.set()
            for ad in ads.values():
                await ad.transport.aclose()

    def describe(self) -> str:
        return (
            f"LCG.swf.gz replayed from hour {self.offset_h:g}, compressed {self.compress:g}x, "
            f"{len(MAP)} partitions: {self.replayed} jobs submitted, {self.skipped} skipped "
            f"while {self.max_pending} waited"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=120, help="seconds to run")
    ap.add_argument("--compress", type=float, default=60.0)
    args = ap.parse_args()
    load = TraceLoad(compress=args.compress).start()
    try:
        time.sleep(args.duration)
    finally:
        cancelled = load.stop()
        print(f"{load.describe()}; {cancelled} cancelled; errors {load.errors[:3]}")


if __name__ == "__main__":
    main()
