"""`fedhpc sites discover`: a profile and config entry from a live scheduler."""

from __future__ import annotations

import argparse
import json
from typing import Any

import anyio

from fedhpc.domain.site import TransportSpec
from fedhpc.errors import UsageError
from fedhpc.onboard.build import Discovery
from fedhpc.onboard.discover import WriteOutcome, discover, write_discovery

__all__ = [
    "add_discover",
    "add_transport_args",
    "print_discovery",
    "spec_from_args",
    "summary",
]


def _env(pairs: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.replace("_", "").isalnum() or key[0].isdigit():
            raise UsageError(
                f"--env {pair!r} is not NAME=VALUE",
                hint="e.g. --env SLURM_CONF=/etc/slurm/slurm.conf",
            )
        env[key] = value
    return env


def _options(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--option {pair!r} is not KEY=VALUE", hint="e.g. --option port=2222")
        out[key] = value
    return out


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 86400:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds in (0, 86400]")
    return value


def spec_from_args(args: argparse.Namespace) -> TransportSpec:
    """The transport the command line names: --ssh HOST [--user U], --endpoint UUID, or
    --local [--env NAME=VALUE...]."""
    chosen = [x for x in (args.ssh, args.endpoint, args.local or None) if x]
    if len(chosen) != 1:
        raise UsageError(
            "name exactly one of --ssh HOST, --endpoint UUID or --local",
            hint="e.g. `fedhpc sites discover mysite --ssh login.example.edu --user me`",
        )
    env, options = _env(args.env or []), _options(args.option or [])
    if args.ssh:
        return TransportSpec(kind="ssh", host=args.ssh, user=args.user, env=env, options=options)
    if args.endpoint:
        return TransportSpec(
            kind="globus-compute", endpoint_id=args.endpoint, env=env, options=options
        )
    return TransportSpec(kind="local", env=env, options=options)


def summary(found: Discovery, outcome: WriteOutcome) -> dict[str, Any]:
    p = found.profile
    return {
        "site": p.name,
        "dialect": p.dialect,
        "partitions": [
            {
                "name": x.name,
                "nodes": x.node.count,
                "cpus": x.node.cpus,
                "memory_mib": x.node.memory_mib,
                "gpus": x.node.accelerator.count if x.node.accelerator else 0,
                "gpu_type": x.node.accelerator.type if x.node.accelerator else None,
                "max_wall_s": x.max_wall_s,
            }
            for x in p.partitions
        ],
        "accounts": [a.model_dump(mode="json", exclude_defaults=True) for a in found.user.accounts],
        "profile_path": str(outcome.profile_path),
        "profile_used": outcome.profile_loaded,
        "config_path": str(outcome.config_path),
        "config_written": outcome.config_written,
        "config_entry": outcome.config_entry,
        "shipped": outcome.shipped is not None,
        "diff": [
            {"field": d.field, "shipped": d.shipped, "discovered": d.discovered}
            for d in outcome.diff
        ],
        "confirm": [c.as_dict() for c in found.confirm],
        "notes": [*found.notes, *outcome.notes],
    }


def print_discovery(found: Discovery, out: WriteOutcome) -> None:
    p = found.profile
    print(f"{p.name}: {p.dialect}, {p.arch.value}, {len(p.partitions)} partition(s)")
    for x in p.partitions:
        acc = x.node.accelerator
        gpu = f" {acc.count}x {acc.type}" if acc else ""
        node = f"{x.node.count} node(s) {x.node.cpus} cpus {x.node.memory_mib} MiB{gpu}"
        print(f"  {x.name:<22} {node}  max wall {x.max_wall_s}s")
    if out.shipped is not None:
        if out.diff:
            print(f"differs from the shipped profile {p.name} ({len(out.diff)}):")
            for d in out.diff:
                print(d.line())
        else:
            same = "partitions, node shapes, GPUs and wall caps"
            print(f"matches the shipped profile {p.name} on {same}")
        where = (
            "in use"
            if out.profile_loaded
            else "kept for reference; the shipped profile is used (--override to use it)"
        )
        print(f"profile: {out.profile_path} ({where})")
    else:
        print(f"profile: {out.profile_path}")
    if out.config_written:
        print(f"config: added [sites.{p.name}] to {out.config_path}")
    else:
        print(
            f"config: {out.config_path} already has [sites.{p.name}]; left as is. Discovered entry:"
        )
        print("  " + out.config_entry.rstrip().replace("\n", "\n  "))
    for note in (*found.notes, *out.notes):
        print(f"note: {note}")
    if found.confirm:
        print("confirm (the scheduler cannot tell these):")
        for c in found.confirm:
            print(f"  {c.field} = {c.value}: {c.why}; see {c.look_up}")
    print(f"next: fedhpc doctor {p.name}")


def _run(args: argparse.Namespace) -> int:
    spec = spec_from_args(args)
    found = anyio.run(
        lambda: discover(
            args.site, spec, dialect=args.dialect, title=args.title or "", timeout_s=args.timeout
        )
    )
    outcome = write_discovery(found, override=args.override)
    if args.json:
        print(json.dumps(summary(found, outcome), indent=2))
    else:
        print_discovery(found, outcome)
    return 0


def add_transport_args(p: argparse.ArgumentParser) -> None:
    how = p.add_argument_group("how to reach the site (one of)")
    how.add_argument("--ssh", metavar="HOST", help="login host or ~/.ssh/config alias")
    how.add_argument("--user", help="login name for --ssh")
    how.add_argument("--endpoint", metavar="UUID", help="Globus Compute endpoint id")
    how.add_argument("--local", action="store_true", help="this machine (with --env)")
    how.add_argument(
        "--env",
        action="append",
        metavar="NAME=VALUE",
        help="environment for every command, e.g. SLURM_CONF=...",
    )
    how.add_argument(
        "--option", action="append", metavar="KEY=VALUE", help="transport option, e.g. port=2222"
    )


def add_discover(s: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = s.add_parser(
        "discover",
        help="build a profile and config entry from the live scheduler",
        description=(
            "Build a profile and config entry from the live scheduler. Onboarding: it talks to "
            "the site directly from this process, not through the daemon (which does not know "
            "the site yet)."
        ),
    )
    p.add_argument("site", help="the site's short name, e.g. delta (a shipped name compares)")
    add_transport_args(p)
    p.add_argument("--dialect", choices=["slurm", "pbs", "lsf"], help="default: found on PATH")
    p.add_argument("--title", help="a title for a new profile")
    p.add_argument(
        "--override",
        action="store_true",
        help="use the discovered profile even where fedhpc ships one",
    )
    p.add_argument(
        "--timeout",
        type=_seconds,
        default=120.0,
        metavar="SECONDS",
        help="how long the scheduler may take to answer its questions (default: 120)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_run)
