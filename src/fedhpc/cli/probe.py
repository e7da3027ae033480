"""`fedhpc probe`: one batched probe per enabled site, concurrently, printed for people."""

from __future__ import annotations

import argparse
import json

import anyio

from fedhpc.adapters.site import open_adapter
from fedhpc.domain.site import SiteState
from fedhpc.errors import UsageError
from fedhpc.profiles import load_federation

__all__ = ["add_parser", "probe_sites"]


async def probe_sites(names: list[str], timeout_s: float = 30.0) -> list[SiteState]:
    """Probe the named enabled sites (all when empty), each under its own timeout."""
    sites = load_federation()
    unknown = [n for n in names if n not in sites]
    if unknown:
        raise UsageError(
            f"not enabled: {', '.join(unknown)}",
            hint="Add the site to your config.toml, or set FEDHPC_DEVFED=1 for the devfed sites.",
        )
    chosen = [sites[n] for n in names] if names else list(sites.values())
    results: dict[str, SiteState] = {}

    async def one(site_name: str) -> None:
        adapter = open_adapter(sites[site_name])
        try:
            results[site_name] = await adapter.probe(timeout_s=timeout_s)
        finally:
            await adapter.transport.aclose()

    async with anyio.create_task_group() as tg:
        for site in chosen:
            tg.start_soon(one, site.name, name=f"probe:{site.name}")
    return [results[s.name] for s in chosen]


def _print(states: list[SiteState]) -> None:
    for st in states:
        print(f"{st.site}: {st.health.value}  arch={st.arch}  accounts={','.join(st.accounts)}")
        if st.error:
            print(f"  error: {st.error}")
        for p in st.partitions:
            by_type = ",".join(f"{k}={v}" for k, v in sorted(p.free_gpus_by_type.items()))
            print(
                f"  {p.name:<20} nodes={p.nodes.usable}/{p.nodes.total} "
                f"gpus free {p.free_gpus}/{p.total_gpus} [{by_type}] "
                f"cpus free {p.free_cpus}/{p.total_cpus} "
                f"pending={p.pending_jobs} running={p.running_jobs}"
            )


def _run(args: argparse.Namespace) -> int:
    states = anyio.run(probe_sites, list(args.sites), float(args.timeout))
    if args.json:
        print(json.dumps([s.model_dump(mode="json") for s in states], indent=2))
    else:
        _print(states)
    return 0 if all(s.health.value != "offline" for s in states) else 1


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("probe", help="probe enabled sites once (one remote call per site)")
    p.add_argument("sites", nargs="*", help="site names (default: every enabled site)")
    p.add_argument("--json", action="store_true", help="print SiteState records as JSON")
    p.add_argument("--timeout", default=30, type=float, help="per-site timeout in seconds")
    p.set_defaults(func=_run)
