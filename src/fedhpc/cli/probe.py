"""`fedhpc probe`: one batched probe per enabled site, concurrently, printed for people. A
diagnostic: it talks to each site directly, not through the daemon (its help says so). Every
site is probed and reported, also when another one fails with a typed error."""

from __future__ import annotations

import argparse
import json
import sys

import anyio

from fedhpc.domain.site import Health, SiteState
from fedhpc.errors import EXIT_CODES, FedError
from fedhpc.onboard.probe import probe_sites

__all__ = ["add_parser"]


EPILOG = (
    "exit status: 0 when every site answered; when a site's probe failed with a typed error "
    "(printed on stderr as error[code]: message, then hint: ...), the code of the first such "
    "site's error (3 for a refused ssh option, 6 for a site that cannot be reached now; "
    "docs/errors.md); else 1 when a site is offline. The other sites are probed and printed "
    "either way."
)


def _print(results: list[tuple[str, SiteState | FedError]]) -> None:
    for name, st in results:
        if isinstance(st, FedError):
            print(f"{name}: failed  error[{st.code}] (on stderr)", flush=True)
            print(f"error[{st.code}]: {st.message}", file=sys.stderr)
            if st.hint:
                print(f"hint: {st.hint}", file=sys.stderr)
            continue
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


def _json(name: str, st: SiteState | FedError) -> object:
    if isinstance(st, FedError):
        return {"site": name, "error": {**st.as_dict(), "kind": st.kind.value}}
    return st.model_dump(mode="json")


def exit_status(results: list[tuple[str, SiteState | FedError]]) -> int:
    """0: every site answered; the first failed site's error code; else 1: a site is offline."""
    for _name, st in results:
        if isinstance(st, FedError):
            return EXIT_CODES[st.kind]
    offline = any(isinstance(st, SiteState) and st.health is Health.OFFLINE for _, st in results)
    return 1 if offline else 0


def _run(args: argparse.Namespace) -> int:
    results = anyio.run(probe_sites, list(args.sites), float(args.timeout))
    if args.json:
        print(json.dumps([_json(name, st) for name, st in results], indent=2))
    else:
        _print(results)
    return exit_status(results)


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
        epilog=EPILOG,
    )
    p.add_argument("sites", nargs="*", help="site names (default: every enabled site)")
    p.add_argument("--json", action="store_true", help="print SiteState records as JSON")
    p.add_argument("--timeout", default=30, type=float, help="per-site timeout in seconds")
    p.set_defaults(func=_run)
