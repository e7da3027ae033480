"""`fedhpc probe`: one batched probe per enabled site, concurrently, printed for people. A
diagnostic: it talks to each site directly, not through the daemon (its help says so)."""

from __future__ import annotations

import argparse
import json

import anyio

from fedhpc.domain.site import SiteState
from fedhpc.onboard.probe import probe_sites

__all__ = ["add_parser"]


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
    p = sub.add_parser(
        "probe",
        help="probe enabled sites once, directly (a diagnostic: not through the daemon)",
        description=(
            "Probe enabled sites once (one remote call per site) and print what each scheduler "
            "reports. A diagnostic: it talks to each site directly from this process, not "
            "through the daemon, so it works while the daemon is stopped; `fedhpc status "
            "--refresh` asks the running daemon instead."
        ),
    )
    p.add_argument("sites", nargs="*", help="site names (default: every enabled site)")
    p.add_argument("--json", action="store_true", help="print SiteState records as JSON")
    p.add_argument("--timeout", default=30, type=float, help="per-site timeout in seconds")
    p.set_defaults(func=_run)
