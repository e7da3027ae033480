"""`fedhpc connect SITE`: the guided first contact. Over SSH it opens the ControlMaster in this
terminal (the one password/MFA prompt a person answers), then discovers the scheduler (a new
center: profile and config entry; a shipped one: the config entry and a diff), then runs the
doctor for the site."""

from __future__ import annotations

import argparse

import anyio

from fedhpc.cli.discover import add_transport_args, print_discovery, spec_from_args
from fedhpc.cli.doctor import run_doctor
from fedhpc.domain.site import TransportSpec
from fedhpc.errors import UsageError
from fedhpc.onboard.discover import discover, write_discovery
from fedhpc.onboard.master import open_master
from fedhpc.profiles import load_federation, load_profiles, load_user_config
from fedhpc.profiles.loader import user_profile_dirs

__all__ = ["add_parser"]


def _known_spec(site: str, args: argparse.Namespace) -> TransportSpec | None:
    """The transport of a profile fedhpc already has (shipped or the user's), with the user's
    overrides and this command line's --user applied."""
    config = load_user_config()
    profiles = load_profiles(user_profile_dirs(config))
    if site not in profiles:
        return None
    enabled = load_federation(config)
    spec = enabled[site].transport if site in enabled else profiles[site].transport
    if args.user:
        spec = spec.model_copy(update={"user": args.user})
    return spec


def _run(args: argparse.Namespace) -> int:
    given = any((args.ssh, args.endpoint, args.local))
    spec = spec_from_args(args) if given else _known_spec(args.site, args)
    if spec is None:
        raise UsageError(
            f"fedhpc has no profile named {args.site!r}",
            hint="Say how to reach it: --ssh HOST [--user U], --endpoint UUID or --local.",
        )
    if spec.kind == "ssh":
        open_master(spec, args.site)
    found = anyio.run(lambda: discover(args.site, spec, dialect=args.dialect))
    outcome = write_discovery(found, override=False)
    print_discovery(found, outcome)
    if args.no_doctor:
        return 0
    print()
    return run_doctor([args.site], resume=False)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "connect",
        help="first contact with a site: open SSH (MFA once), discover, doctor",
        description=(
            "First contact with a site: open its SSH session in this terminal (MFA once), "
            "discover the scheduler, run the doctor. Onboarding: it talks to the site directly, "
            "not through the daemon (which does not know the site yet)."
        ),
    )
    p.add_argument("site", help="a shipped center (e.g. delta) or a new name")
    add_transport_args(p)
    p.add_argument("--dialect", choices=["slurm", "pbs", "lsf"], help="default: found on PATH")
    p.add_argument("--no-doctor", action="store_true", help="stop after discovery")
    p.set_defaults(func=_run)
