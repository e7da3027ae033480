"""Placement decision time on a 7-site federation (the shipped real-center profiles) with seeded
synthetic snapshots, and its ratio to one real `sbatch` round trip on the local federation.

Then the scaling table (issue 16): synthetic federations of N sites x 20 partitions built from
the same profiles (site i copies profile i mod 7, its partitions repeated and renamed to 20), with
about 10,000 queued jobs spread over the partitions' queues and 10,000 wait observations. One
placement's median over the envelopes above and policies, and a 1,000-child group.

Run: .venv/bin/python benchmarks/placement.py [--tasks 400] [--group 1000] [--seed 7]
         [--scale 4,16,50,200] [--scale-tasks 60] [--group-runs 5] [--no-sbatch]

Wall-clock figures on this machine drift by a third within seconds (the same work measured
0.12-0.25 s back to back): `benchmarks/instructions.py` counts instructions instead, which
repeat to within a percent, to compare two commits.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from datetime import UTC, datetime, timedelta

from fedhpc.domain import (
    Credit,
    Health,
    NodeStateCounts,
    PartitionState,
    ResourceEnvelope,
    ResourceSnapshot,
    SiteProfile,
    SiteState,
    UserSiteConfig,
)
from fedhpc.domain.config import Site
from fedhpc.placement import (
    Placement,
    PlacementInputs,
    Policy,
    Settings,
    WaitHistory,
    WaitObservation,
    place,
    place_group,
)
from fedhpc.profiles import load_profiles

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def federation() -> dict[str, Site]:
    profiles = {n: p for n, p in load_profiles().items() if not p.local_test}
    return {
        n: Site(p, UserSiteConfig(budget=50_000.0, task_budget=5_000.0))
        for n, p in profiles.items()
    }


def _accounts(profile: SiteProfile) -> tuple[str, ...]:
    """One allocation per charge class the site separates (Delta: -cpu/-gpu, Anvil: -gpu/-ai)."""
    suffixes = {p.account_suffix for p in profile.partitions if p.account_suffix}
    return tuple(sorted({"proj", *(f"proj{s}" for s in suffixes)}))


def synthetic_state(rng: random.Random, profile: SiteProfile, at: datetime) -> SiteState:
    parts = []
    for spec in profile.partitions:
        node = spec.node
        acc = node.accelerator.count if node.accelerator else 0
        busy = rng.random()
        idle = int(node.count * (1 - busy) * rng.random())
        mixed = int((node.count - idle) * rng.random() * 0.5)
        down = rng.randint(0, max(0, node.count // 50))
        alloc = max(0, node.count - idle - mixed - down)
        free_gpus = idle * acc + rng.randint(0, mixed * acc) if acc else 0
        free_cpus = idle * node.cpus + rng.randint(0, mixed * node.cpus // 2 + 1)
        pending = int(rng.paretovariate(1.1) * 5) - 5
        parts.append(
            PartitionState(
                name=spec.name,
                nodes=NodeStateCounts(idle=idle, mixed=mixed, allocated=alloc, down=down),
                total_gpus=node.count * acc,
                free_gpus=free_gpus,
                free_gpus_by_type={node.accelerator.type: free_gpus} if node.accelerator else {},
                total_cpus=node.count * node.cpus,
                free_cpus=free_cpus,
                free_memory_mib=(idle + mixed) * node.memory_mib // 2,
                max_free_gpus_on_node=min(acc, free_gpus),
                max_free_cpus_on_node=min(node.cpus, free_cpus),
                pending_jobs=min(pending, 5000),
                running_jobs=alloc + mixed,
                user_pending_jobs=rng.choice([0, 0, 0, 1, 2]),
            )
        )
    accounts = _accounts(profile)
    health = rng.choices([Health.OK, Health.DEGRADED, Health.OFFLINE], [0.9, 0.07, 0.03])[0]
    return SiteState(
        site=profile.name,
        health=health,
        collected_at=at - timedelta(seconds=rng.uniform(0, 300)),
        arch=profile.arch,
        partitions=tuple(parts),
        accounts=accounts,
        credit=tuple(
            Credit(account=a, used=rng.uniform(0, 20_000), balance=rng.uniform(0, 1e5))
            for a in accounts
        ),
    )


def synthetic_snapshot(
    rng: random.Random, sites: dict[str, Site], at: datetime
) -> ResourceSnapshot:
    return ResourceSnapshot(
        taken_at=at, sites={n: synthetic_state(rng, s.profile, at) for n, s in sites.items()}
    )


ENVELOPES: tuple[ResourceEnvelope, ...] = (
    ResourceEnvelope.model_validate(
        {
            "cpus": {"min": 4, "max": 64},
            "memory": {"min": "8G", "max": "128G"},
            "wall_time": {"min": "1h", "max": "2h"},
        }
    ),
    ResourceEnvelope.model_validate(
        {
            "gpus": {"min": 1, "max": 1},
            "cpus": {"min": 2, "max": 8},
            "wall_time": {"min": "30m", "max": "1h"},
        }
    ),
    ResourceEnvelope.model_validate(
        {
            "gpus": {"min": 1, "max": 4},
            "cpus": {"min": 8, "max": 32},
            "memory": {"min": "32G", "max": "128G"},
            "wall_time": {"min": "2h", "max": "4h"},
        }
    ),
    ResourceEnvelope.model_validate(
        {
            "gpus": {"min": 4, "max": 4},
            "nodes": {"min": 1, "max": 2},
            "wall_time": {"min": "1h", "max": "2h"},
        }
    ),
    ResourceEnvelope.model_validate(
        {"gpus": {"min": 1, "max": 1}, "min_accelerator_memory_gib": 200}
    ),
)


def scaled_federation(n: int, per_site: int = 20) -> dict[str, Site]:
    """`n` sites of `per_site` partitions each: site i is profile i mod 7 with its partitions
    repeated (renamed p00, p01, ...) to `per_site`."""
    base = sorted(federation().values(), key=lambda s: s.profile.name)
    out: dict[str, Site] = {}
    for i in range(n):
        src = base[i % len(base)]
        specs = src.profile.partitions
        parts = tuple(
            specs[j % len(specs)].model_copy(
                update={"name": f"p{j:02d}", "scheduler_partition": None}
            )
            for j in range(per_site)
        )
        name = f"s{i:03d}{src.profile.name}"[:32]
        profile = src.profile.model_copy(
            update={"name": name, "partitions": parts, "blocked_partitions": ()}
        )
        out[name] = Site(profile, src.user)
    return out


def with_queued(rng: random.Random, snap: ResourceSnapshot, total: int) -> ResourceSnapshot:
    """The snapshot with about `total` pending jobs spread over its partitions' queues."""
    parts = [(n, p) for n, st in snap.sites.items() for p in st.partitions]
    weights = [rng.paretovariate(1.2) for _ in parts]
    scale = total / sum(weights)
    sites = {}
    for name, st in snap.sites.items():
        ps = tuple(
            p.model_copy(update={"pending_jobs": int(w * scale)})
            for (n, p), w in zip(parts, weights, strict=True)
            if n == name
        )
        sites[name] = st.model_copy(update={"partitions": ps})
    return snap.model_copy(update={"sites": sites})


def history(
    rng: random.Random, sites: dict[str, Site], total: int | None = None
) -> list[WaitObservation]:
    out = []
    nparts = sum(len(s.profile.partitions) for s in sites.values())
    hi = 30 if total is None else max(1, 2 * total // nparts)
    for name, site in sorted(sites.items()):
        for spec in site.profile.partitions:
            for _ in range(rng.randint(0, hi)):
                g = rng.choice([0, 1, 2, 4]) if spec.node.accelerator else 0
                out.append(
                    WaitObservation(
                        site=name,
                        partition=spec.name,
                        gpus=g,
                        cpus=8,
                        nodes=1,
                        wait_s=rng.expovariate(1 / 600),
                        observed_at=NOW - timedelta(hours=rng.uniform(0, 200)),
                    )
                )
    return out


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def bench_tasks(
    n: int,
    seed: int,
    sites: dict[str, Site],
    *,
    queued: int = 0,
    observations: int | None = None,
    snapshots: int = 10,
) -> list[float]:
    rng = random.Random(seed)  # noqa: S311 (seeded synthetic data)
    snaps = [synthetic_snapshot(rng, sites, NOW) for _ in range(snapshots)]
    if queued:
        snaps = [with_queued(rng, s, queued) for s in snaps]
    hist = WaitHistory(history(rng, sites, observations), now=NOW, settings=Settings())
    policies = [Policy(), Policy(kind="shortest-queue"), Policy(objective="p90")]
    times = []
    for i in range(n):
        env, snap = ENVELOPES[i % len(ENVELOPES)], snaps[i % len(snaps)]
        t0 = time.perf_counter()
        place(env, PlacementInputs(snap, sites, policies[i % len(policies)], now=NOW, history=hist))
        times.append(time.perf_counter() - t0)
    return times


def bench_group(
    n: int,
    seed: int,
    sites: dict[str, Site],
    *,
    queued: int = 0,
    observations: int | None = None,
    runs: int = 1,
) -> tuple[float, int]:
    """Seconds of one `n`-child group on a snapshot of its own (the median of `runs`, each the
    same work on a new snapshot: this machine's speed drifts by a third within seconds), and
    how many children were placed."""
    child = ResourceEnvelope.model_validate(
        {"gpus": {"min": 1, "max": 1}, "cpus": {"min": 2, "max": 8}, "wall_time": {"min": "1h"}}
    )
    times, placed = [], 0
    for _ in range(runs):
        rng = random.Random(seed)  # noqa: S311 (seeded synthetic data)
        snap = synthetic_snapshot(rng, sites, NOW)
        if queued:
            snap = with_queued(rng, snap, queued)
        t0 = time.perf_counter()
        obs = history(rng, sites, observations)
        out = place_group([child] * n, PlacementInputs(snap, sites, now=NOW, history=obs))
        times.append(time.perf_counter() - t0)
        placed = sum(isinstance(d, Placement) for d in out)
    return statistics.median(times), placed


def sbatch_round_trip(samples: int = 5) -> float | None:
    """Median seconds of one real submission through the site adapter (then cancelled)."""
    import anyio

    from fedhpc.adapters.site import open_adapter
    from fedhpc.domain import JobSpec, Shape
    from fedhpc.profiles import load_federation

    os.environ["FEDHPC_DEVFED"] = "1"

    async def run() -> float | None:
        sites = load_federation()
        if "devdelta" not in sites:
            return None
        adapter = open_adapter(sites["devdelta"])
        times, ids = [], []
        try:
            for i in range(samples):
                spec = JobSpec(
                    name=f"fedhpc-bench-{i}",
                    command=("sleep", "30"),
                    partition="cpu",
                    account="fedhpc-cpu",
                    shape=Shape(cpus=1, memory_mib=128, wall_time_s=120),
                )
                t0 = time.perf_counter()
                job = await adapter.submit(spec)
                times.append(time.perf_counter() - t0)
                ids.append(job.job_id)
        except Exception as exc:
            print(f"  sbatch failed: {exc}")
            return None
        finally:
            if ids:
                await adapter.cancel(ids)
            await adapter.transport.aclose()
        return statistics.median(times)

    try:
        return anyio.run(run)
    except Exception as exc:
        print(f"  local federation unavailable: {exc}")
        return None


def scaling(args: argparse.Namespace) -> None:
    counts = [int(x) for x in args.scale.split(",") if x.strip()]
    if not counts:
        return
    print()
    print(
        f"scaling: N sites x 20 partitions, ~10,000 queued jobs, ~10,000 wait observations; "
        f"median of {args.scale_tasks} decisions; a {args.scale_group}-child group, "
        f"median of {args.group_runs} runs"
    )
    print("| sites | partitions | one placement (median) | p99 | group | placed | target |")
    print("|---:|---:|---:|---:|---:|---:|---|")
    for n in counts:
        sites = scaled_federation(n)
        nparts = sum(len(s.profile.partitions) for s in sites.values())
        kw = {"queued": 10_000, "observations": 10_000}
        bench_tasks(5, args.seed + 1, sites, snapshots=2, **kw)  # warm-up
        times = bench_tasks(args.scale_tasks, args.seed, sites, snapshots=3, **kw)
        med, p99 = statistics.median(times), pct(times, 0.99)
        group_s, placed = bench_group(
            args.scale_group, args.seed, sites, runs=args.group_runs, **kw
        )
        target = "<= 10 ms, group <= 2 s" if n == 50 else ""
        print(
            f"| {n} | {nparts} | {med * 1e3:.2f} ms | {p99 * 1e3:.2f} ms | {group_s:.3f} s "
            f"| {placed} | {target} |",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=400)
    ap.add_argument("--group", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--scale", default="4,16,50,200", help="site counts of the scaling table")
    ap.add_argument("--scale-tasks", type=int, default=60, help="decisions per scaling row")
    ap.add_argument("--scale-group", type=int, default=1000, help="children per scaling row")
    ap.add_argument("--group-runs", type=int, default=5, help="runs of each group (median)")
    ap.add_argument("--no-sbatch", action="store_true", help="skip the real sbatch round trip")
    args = ap.parse_args()
    sites = federation()
    nparts = sum(len(s.profile.partitions) for s in sites.values())
    print(f"federation: {len(sites)} sites, {nparts} partitions ({', '.join(sorted(sites))})")
    bench_tasks(50, args.seed + 1, sites)  # warm-up (imports, caches)
    times = bench_tasks(args.tasks, args.seed, sites)
    med, p99 = statistics.median(times), pct(times, 0.99)
    print(
        f"per task ({args.tasks} decisions): median {med * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms"
        f"  (target median <= 2 ms)"
    )
    group_s, placed = bench_group(args.group, args.seed, sites, runs=args.group_runs)
    print(
        f"group of {args.group} children (median of {args.group_runs}): {group_s:.3f} s "
        f"({placed} placed)  (target <= 0.25 s)"
    )
    scaling(args)
    if args.no_sbatch:
        print("sbatch round trip: skipped (--no-sbatch)")
        return
    rt = sbatch_round_trip()
    if rt is None:
        print("sbatch round trip: local federation not up; ratio not measured")
    else:
        print(
            f"sbatch round trip (devdelta, median of 5): {rt * 1e3:.1f} ms; "
            f"placement/sbatch = {med / rt:.3f}"
        )


if __name__ == "__main__":
    main()
