"""Placement decision time on a 7-site federation (the shipped real-center profiles) with seeded
synthetic snapshots, and its ratio to one real `sbatch` round trip on the local federation.

Run: .venv/bin/python benchmarks/placement.py [--tasks 400] [--group 1000] [--seed 7]
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
from fedhpc.placement import (
    Placement,
    Policy,
    Settings,
    WaitHistory,
    WaitObservation,
    place,
    place_group,
)
from fedhpc.profiles import Site, load_profiles

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


ENVELOPES = (
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


def history(rng: random.Random, sites: dict[str, Site]) -> list[WaitObservation]:
    out = []
    for name, site in sorted(sites.items()):
        for spec in site.profile.partitions:
            for _ in range(rng.randint(0, 30)):
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


def bench_tasks(n: int, seed: int, sites: dict[str, Site]) -> list[float]:
    rng = random.Random(seed)  # noqa: S311 (seeded synthetic data)
    snaps = [synthetic_snapshot(rng, sites, NOW) for _ in range(10)]
    hist = WaitHistory(history(rng, sites), now=NOW, settings=Settings())
    policies = [Policy(), Policy(kind="shortest-queue"), Policy(objective="p90")]
    times = []
    for i in range(n):
        env, snap = ENVELOPES[i % len(ENVELOPES)], snaps[i % len(snaps)]
        t0 = time.perf_counter()
        place(env, snap, sites, policies[i % len(policies)], now=NOW, history=hist)
        times.append(time.perf_counter() - t0)
    return times


def bench_group(n: int, seed: int, sites: dict[str, Site]) -> tuple[float, int]:
    rng = random.Random(seed)  # noqa: S311 (seeded synthetic data)
    snap = synthetic_snapshot(rng, sites, NOW)
    child = ResourceEnvelope.model_validate(
        {"gpus": {"min": 1, "max": 1}, "cpus": {"min": 2, "max": 8}, "wall_time": {"min": "1h"}}
    )
    t0 = time.perf_counter()
    out = place_group([child] * n, snap, sites, now=NOW, history=history(rng, sites))
    return time.perf_counter() - t0, sum(isinstance(d, Placement) for d in out)


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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=400)
    ap.add_argument("--group", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=7)
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
    group_s, placed = bench_group(args.group, args.seed, sites)
    print(f"group of {args.group} children: {group_s:.3f} s ({placed} placed)  (target <= 1 s)")
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
