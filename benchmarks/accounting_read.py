"""What one read of the user's accounting holds at once (issue 16): peak traced memory.

The daemon's learned wait estimator reads the user's jobs from each Slurm site's accounting
(`WaitInputs.learn_from_accounting`); a site's first read takes the whole 14-day window. This
feeds a synthetic `sacct` answer of `--jobs` rows (the user's jobs over 14 days on four
partitions and several sizes, as `sacct --parsable2 --allocations` writes them) through that
read path: a real `SiteAdapter` on a real `LocalTransport` whose `sacct` on PATH is a script
that writes the answer from a file. tracemalloc measures the Python heap's peak during the read
(the transport's buffers, the text, the parse, what is kept), all threads included.

Run it at two commits to compare (the script uses only what both have):
    .venv/bin/python benchmarks/accounting_read.py [--jobs 50000] [--own 0.0] [--json]
    PYTHONPATH=/tmp/before/src .venv/bin/python benchmarks/accounting_read.py
`--own` is the share of rows that are fedhpc's own jobs (skipped before parsing).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import stat
import sys
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path
from typing import TypedDict

import anyio

os.environ.setdefault("FEDHPC_DEVFED", "1")

import fedhpc
from fedhpc.adapters.site import SiteAdapter
from fedhpc.adapters.transports.local import LocalTransport
from fedhpc.collector import Collector
from fedhpc.domain.site import Health, SiteState, TransportSpec
from fedhpc.orchestrator.estimates import WaitInputs
from fedhpc.profiles import load_federation
from fedhpc.store import Store

SITE = "devanvil"
SHAPES = (
    "billing=4,cpu=4,mem=16G,node=1",
    "billing=64,cpu=64,mem=250G,node=2",
    "billing=8,cpu=8,gres/gpu=1,mem=64G,node=1",
    "billing=32,cpu=32,gres/gpu=4,mem=240G,node=1",
)
PARTITIONS = ("shared", "debug", "ai", "gpu")


def answer(path: Path, jobs: int, own: float, now: datetime) -> int:
    """Write `jobs` rows of `sacct --parsable2` (epoch seconds) to `path`; its size in bytes."""
    rnd = random.Random(16)  # noqa: S311 (seeded synthetic data)
    t_end = int(now.timestamp())
    with path.open("w") as f:
        for i in range(jobs):
            start = t_end - rnd.randrange(0, 14 * 86400)
            submit = start - rnd.randrange(0, 7200)
            end = start + rnd.randrange(30, 7200)
            name = f"fedhpc-t{i:012x}-{i % 5000:04d}-1" if rnd.random() < own else f"train-{i}"
            j = rnd.randrange(len(SHAPES))
            f.write(
                f"{1_000_000 + i}|COMPLETED|proj-{j}|{PARTITIONS[j]}|{submit}|{submit}|{start}|"
                f"{end}|{end - start}|0:0|{SHAPES[j]}|{name}\n"
            )
    return path.stat().st_size


class Reading(TypedDict):
    """One read's figures."""

    fedhpc: str  # the fedhpc package read (which checkout)
    jobs: int
    own_share: float
    answer_bytes: int
    kept: int
    read_s: float
    peak_traced_mb: float
    remote_calls: dict[str, int]


async def read(jobs: int, own: float, tmp: Path) -> Reading:
    now = datetime.now(UTC)
    size = answer(tmp / "sacct.txt", jobs, own, now)
    fake = tmp / "bin" / "sacct"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\nexec cat {tmp / 'sacct.txt'}\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    site = load_federation()[SITE]
    path = f"{fake.parent}:{os.environ['PATH']}"
    transport = LocalTransport(TransportSpec(kind="local", env={"PATH": path}))
    adapters = {SITE: SiteAdapter(site, transport)}
    store = await Store.open(tmp / "o.db")
    try:
        collector = Collector({SITE: site}, adapters, store)
        collector.latest[SITE] = SiteState(site=SITE, health=Health.OK, collected_at=now)
        waits = WaitInputs(store, collector, adapters, clock=lambda: now, cycle_s=30, timeout_s=60)
        tracemalloc.start()
        t0 = time.perf_counter()
        kept = await waits.learn_from_accounting(force=True)
        took = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    finally:
        await store.close()
    return {
        "fedhpc": getattr(fedhpc, "__file__", "?"),
        "jobs": jobs,
        "own_share": own,
        "answer_bytes": size,
        "kept": kept,
        "read_s": round(took, 2),
        "peak_traced_mb": round(peak / 1e6, 2),
        "remote_calls": dict(adapters[SITE].calls),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=50_000)
    p.add_argument("--own", type=float, default=0.0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="fedhpc-acct-") as d:
        out = anyio.run(read, args.jobs, args.own, Path(d))
    if args.json:
        print(json.dumps(out))
        return
    print(f"fedhpc from {out['fedhpc']}")
    print(
        f"{out['jobs']:,} rows ({out['answer_bytes'] / 1e6:.1f} MB, {args.own:.0%} fedhpc's own): "
        f"peak traced {out['peak_traced_mb']} MB, kept {out['kept']}, read in {out['read_s']} s, "
        f"remote calls {out['remote_calls']}"
    )
    if not out["kept"]:
        sys.exit("nothing kept: the read failed (see the log above)")


if __name__ == "__main__":
    main()
