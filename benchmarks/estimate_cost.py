"""What asking the schedulers costs a decision: latency and remote calls (issue 20).

An in-process `Orchestrator` on the local Slurm federation (real collector, real adapters,
each transport wrapped to count its remote calls) makes N decisions with the daemon's default
`wait = auto`: the top candidates of a first pass get `sbatch --test-only` in one batched call
per site, all sites at once, answers reused within a control cycle. Decisions cycle through
CPU, 1-GPU and 4-GPU requests with a few wall times, so some shapes repeat within a cycle and
some do not; every `--cycle` decisions the cache is cleared (a new control cycle). Submits
nothing.

Prints decision latency (median, p95, max; target p95 <= 1 s), test-only calls per decision,
and calls per candidate site (target <= 1), plus the same decisions without asking (learned /
paper only) for comparison.

`--hang SITE` points SITE's Slurm commands at a controller that accepts and never answers:
the decision that meets it waits the estimate timeout once per cycle, then the site's failure
is remembered for the cycle.

Run: .venv/bin/python benchmarks/estimate_cost.py [--decisions 60] [--cycle 6] [--hang SITE]
     [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

os.environ.setdefault("FEDHPC_DEVFED", "1")

from fedhpc.adapters.command import Command, CommandResult
from fedhpc.adapters.site import SiteAdapter, open_adapter
from fedhpc.adapters.transports import Transport
from fedhpc.adapters.transports.local import LocalTransport
from fedhpc.collector import Collector
from fedhpc.domain import JobState, ResourceEnvelope
from fedhpc.domain.config import Site
from fedhpc.ops.tasks import SubmitTaskRequest
from fedhpc.orchestrator import Orchestrator
from fedhpc.orchestrator.records import TaskRecord, new_id
from fedhpc.orchestrator.start_estimates import EstimateCache, SchedulerAnswer
from fedhpc.placement import Placement
from fedhpc.profiles import load_federation
from fedhpc.store import Store

KINDS = (
    {"cpus": {"min": 8, "max": 8}},
    {"gpus": {"min": 1, "max": 1}, "cpus": {"min": 4, "max": 4}},
    {"gpus": {"min": 4, "max": 4}, "cpus": {"min": 8, "max": 8}},
)
WALLS = ("10m", "30m", "1h", "2h")


class Counting:
    """A real transport plus a tally of the `sbatch --test-only` calls sent through it."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.name = inner.name
        self.test_only = 0

    async def run(self, command: Command) -> CommandResult:
        if "--test-only" in (command.stdin or ""):
            self.test_only += 1
        return await self.inner.run(command)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _task(i: int) -> TaskRecord:
    kind, wall = KINDS[i % len(KINDS)], WALLS[(i // (2 * len(KINDS))) % len(WALLS)]
    env = ResourceEnvelope.model_validate({**kind, "wall_time": {"min": wall, "max": wall}})
    req = SubmitTaskRequest(command=("true",), envelope=env)
    return TaskRecord(
        id=new_id("t"),
        request=req,
        idempotency_key=new_id("k"),
        state=JobState.QUEUED,
        created_at=datetime.now(UTC),
    )


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * len(s) + 0.5) - 1))]


class ManualClock:
    """The estimate cache's clock, moved on by hand: one control cycle per step."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _hung(site: Site, port: int, tmp: Path) -> LocalTransport:
    """`site`'s transport with its Slurm commands sent to a controller that never answers."""
    src = Path(site.transport.env["SLURM_CONF"])
    conf = tmp / f"{site.name}-conf"
    conf.mkdir()
    for f in src.parent.glob("*.conf"):
        shutil.copy(f, conf / f.name)
    lines = [
        f"SlurmctldPort={port}" if ln.startswith("SlurmctldPort=") else ln
        for ln in (conf / "slurm.conf").read_text().splitlines()
    ]
    (conf / "slurm.conf").write_text("\n".join(lines) + "\n")
    env = {"SLURM_CONF": str(conf / "slurm.conf")}
    return LocalTransport(site.transport.model_copy(update={"env": env}))


async def run(n: int, cycle: int, hang: str | None = None) -> dict[str, Any]:
    sites = load_federation()
    probe = {k: open_adapter(s) for k, s in sites.items()}
    tmp = Path(tempfile.mkdtemp(prefix="fedhpc-estimate-cost-"))
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    port = silent.getsockname()[1]
    counted = {
        k: Counting(_hung(s, port, tmp) if k == hang else open_adapter(s).transport)
        for k, s in sites.items()
    }
    adapters = {k: SiteAdapter(s, counted[k]) for k, s in sites.items()}
    store = await Store.open(tmp / "b.db")
    try:
        collector = Collector(sites, probe, store, refresh_s=60, probe_timeout_s=20)
        await collector.refresh(force=True)
        o = Orchestrator(store, collector, adapters, cycle_s=3600)
        rows = []
        for ask in (True, False):
            clock = ManualClock()  # a control cycle of 10 s every `cycle` decisions
            o.waits.cache = EstimateCache(ttl_s=10.0, clock=clock)
            o.waits.placed = {}
            for i in range(n):
                if i and i % cycle == 0:
                    clock.now += 10.0
                task = _task(i)
                before = sum(c.test_only for c in counted.values())
                t0 = time.perf_counter()
                if ask:
                    d = await o.planner.decide(task)
                else:
                    d = await o.planner.decide(task, answer=SchedulerAnswer())  # nothing asked
                dt = time.perf_counter() - t0
                calls = sum(c.test_only for c in counted.values()) - before
                assert isinstance(d, Placement), d
                cand_sites = len({c.site for c in d.trace.candidates if c.feasible})
                rows.append(
                    {
                        "ask": ask,
                        "latency_s": dt,
                        "calls": calls,
                        "candidate_sites": cand_sites,
                        "source": d.estimates.wait_source.split(";")[0],
                    }
                )
        return {"rows": rows, "decisions": n, "cycle": cycle, "hang": hang}
    finally:
        silent.close()
        await store.close()
        for a in [*probe.values(), *adapters.values()]:
            await a.transport.aclose()


def summarize(report: dict[str, Any]) -> str:
    out = []
    for ask in (True, False):
        rows = [r for r in report["rows"] if r["ask"] is ask]
        lat = [r["latency_s"] for r in rows]
        calls = [r["calls"] for r in rows]
        per_site = [r["calls"] / r["candidate_sites"] for r in rows if r["candidate_sites"]]
        sources: dict[str, int] = {}
        for r in rows:
            sources[r["source"]] = sources.get(r["source"], 0) + 1
        label = "with scheduler estimates" if ask else "without (learned/paper only)"
        p95 = pct(lat, 0.95)
        out.append(
            f"{label}: {len(rows)} decisions, latency median {statistics.median(lat):.3f} s, "
            f"p95 {p95:.3f} s, max {max(lat):.3f} s"
            + (f" (target p95 <= 1 s: {'pass' if p95 <= 1 else 'FAIL'})" if ask else "")
        )
        if ask:
            worst = max(per_site)
            out.append(
                f"  test-only calls per decision: mean {statistics.fmean(calls):.2f}, "
                f"max {max(calls)}; per candidate site: mean {statistics.fmean(per_site):.2f}, "
                f"max {worst:.2f} (target <= 1: {'pass' if worst <= 1 else 'FAIL'}); "
                f"decisions with no call (cache): {sum(c == 0 for c in calls)}"
            )
        out.append(f"  deciding wait source: {sources}")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--decisions", type=int, default=60)
    ap.add_argument("--cycle", type=int, default=6, help="decisions per control cycle")
    ap.add_argument("--hang", default=None, help="a site whose controller never answers")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from fedhpc.logs import configure_logging

    configure_logging("warning")
    report = anyio.run(run, args.decisions, args.cycle, args.hang)
    if args.hang:
        print(f"{args.hang}'s scheduler hangs (a silent controller port); estimate timeout 2 s")
    if args.json:
        json.dump(report, sys.stdout, indent=1)
    print(summarize(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
