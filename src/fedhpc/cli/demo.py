"""`fedhpc demo`: the local federation end to end, as far as the built layers reach.

It probes the four devfed clusters (one remote call each), submits a small job to every
feasible partition through the site adapters, follows them to completion and prints the
scheduler's own accounting. Later layers (placement, daemon, MCP, resume) extend this demo.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass

import anyio

from fedhpc.adapters.site import SiteAdapter, open_adapter
from fedhpc.domain.job import AccountingRecord, JobSpec, JobState, Shape
from fedhpc.domain.site import Health, SiteState
from fedhpc.errors import UsageError
from fedhpc.profiles import Site, load_federation

__all__ = ["add_parser"]


@dataclass
class _Run:
    site: str
    partition: str
    job_id: str
    gpus: int
    record: AccountingRecord | None = None


def _jobs_for(site: Site, state: SiteState) -> list[JobSpec]:
    specs = []
    for part in site.profile.partitions:
        live = state.partition(part.name)
        if part.name in site.profile.blocked_partitions or live is None or not live.available:
            continue
        gpus = 1 if part.node.accelerator else 0
        specs.append(
            JobSpec(
                name=f"fedhpc-demo-{part.name.lower()}"[:60],
                command=(
                    "bash",
                    "-c",
                    'echo "on $(hostname) GPUs=${CUDA_VISIBLE_DEVICES:-none}"; sleep 3',
                ),
                partition=part.name,
                account="fedhpc-gpu" if gpus else "fedhpc-cpu",
                shape=Shape(cpus=1, gpus=gpus, memory_mib=256, wall_time_s=300),
                stdout=f"{site.profile.storage[0].path}/%x-%j.out"
                if site.profile.storage
                else None,
            )
        )
    return specs


async def _follow(adapter: SiteAdapter, runs: list[_Run], deadline_s: float) -> None:
    ids = [r.job_id for r in runs]
    with anyio.fail_after(deadline_s):
        while True:
            records = {r.job_id: r for r in await adapter.accounting(ids)}
            if all(i in records and records[i].settled for i in ids):
                for run in runs:
                    run.record = records[run.job_id]
                return
            await anyio.sleep(1)


async def _demo(deadline_s: float) -> int:
    os.environ.setdefault("FEDHPC_DEVFED", "1")
    sites = {n: s for n, s in load_federation().items() if s.profile.local_test}
    if not sites:
        raise UsageError("no local federation sites", hint="Run `fedhpc devfed up` first.")
    adapters = {n: open_adapter(s) for n, s in sites.items()}
    states: dict[str, SiteState] = {}

    async def probe(name: str) -> None:
        states[name] = await adapters[name].probe()

    t0 = time.monotonic()
    async with anyio.create_task_group() as tg:
        for name in adapters:
            tg.start_soon(probe, name)
    print(f"== probed {len(states)} sites in {time.monotonic() - t0:.2f}s (one call per site)")
    for name in sorted(states):
        st = states[name]
        gpus = sum(p.free_gpus for p in st.partitions)
        print(
            f"  {name:<11} {st.health.value:<8} arch={st.arch} free GPUs={gpus} "
            f"accounts={','.join(st.accounts) or '-'}"
        )
    runs: dict[str, list[_Run]] = {}
    for name in sorted(states):
        if states[name].health is Health.OFFLINE:
            continue
        for spec in _jobs_for(sites[name], states[name]):
            submitted = await adapters[name].submit(spec)
            runs.setdefault(name, []).append(
                _Run(name, spec.partition, submitted.job_id, spec.shape.gpus)
            )
    total = sum(len(r) for r in runs.values())
    print(f"== submitted {total} jobs; following them through sacct")
    async with anyio.create_task_group() as tg:
        for name, site_runs in runs.items():
            tg.start_soon(_follow, adapters[name], site_runs, deadline_s)
    print(
        f"  {'site':<11} {'partition':<18} {'job':>6} {'gpus':>4} {'state':<10} "
        f"{'wait s':>6} {'run s':>6}"
    )
    ok = True
    for site_runs in runs.values():
        for run in site_runs:
            rec = run.record
            assert rec is not None
            ok &= rec.state is JobState.COMPLETED
            print(
                f"  {run.site:<11} {run.partition:<18} {run.job_id:>6} {run.gpus:>4} "
                f"{rec.state.value:<10} {rec.wait_s or 0:>6.0f} {rec.runtime_s or 0:>6.0f}"
            )
    for adapter in adapters.values():
        await adapter.transport.aclose()
    print("== demo " + ("passed" if ok else "FAILED"))
    return 0 if ok else 1


def _run(args: argparse.Namespace) -> int:
    return anyio.run(_demo, float(args.deadline))


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("demo", help="run the local-federation demo (after `fedhpc devfed up`)")
    p.add_argument("--deadline", default=300, type=float, help="seconds to wait for the jobs")
    p.set_defaults(func=_run)
