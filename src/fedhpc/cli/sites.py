"""`fedhpc sites`: list, show and check site profiles."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from fedhpc.cli.discover import add_discover
from fedhpc.cli.table import table_lines
from fedhpc.domain.site import SiteProfile
from fedhpc.errors import NotFound
from fedhpc.profiles import load_profile, load_profiles, load_user_config
from fedhpc.profiles.loader import user_profile_dirs

__all__ = ["add_parser"]


def _gpus(profile: SiteProfile) -> str:
    kinds = sorted(
        {
            f"{p.node.accelerator.count}x{p.node.accelerator.type}"
            for p in profile.partitions
            if p.node.accelerator
        }
    )
    return ",".join(kinds) or "-"


def _list(args: argparse.Namespace) -> int:
    config = load_user_config()
    profiles = load_profiles(user_profile_dirs(config))
    rows = [("SITE", "CENTER", "SCHED", "ARCH", "PARTITIONS", "GPUS", "CONFIGURED")]
    for name, p in sorted(profiles.items()):
        configured = "yes" if name in config.sites else ("devfed" if p.local_test else "-")
        parts = ",".join(x.name for x in p.partitions)
        rows.append((name, p.center, p.dialect, p.arch.value, parts, _gpus(p), configured))
    print("\n".join(table_lines(rows)))
    return 0


def _show(args: argparse.Namespace) -> int:
    config = load_user_config()
    profiles = load_profiles(user_profile_dirs(config))
    if args.site not in profiles:
        raise NotFound(f"no site profile named {args.site!r}", hint="See `fedhpc sites list`.")
    print(json.dumps(profiles[args.site].model_dump(mode="json"), indent=2))
    return 0


def _check(args: argparse.Namespace) -> int:
    """Validate profile files; raises ProfileError (one clear line) on the first broken one."""
    paths = [Path(p) for p in args.files]
    for path in paths:
        load_profile(path)
    if not paths:
        load_profiles(user_profile_dirs(load_user_config()))
    print(f"ok: {len(paths) or 'all'} profile(s) valid")
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("sites", help="site profiles: list, show, check, discover")
    s = p.add_subparsers(dest="sites_cmd", required=True)
    s.add_parser("list", help="every shipped and user profile").set_defaults(func=_list)
    show = s.add_parser("show", help="one profile as JSON")
    show.add_argument("site")
    show.set_defaults(func=_show)
    check = s.add_parser("check", help="validate profile files (default: all loaded ones)")
    check.add_argument("files", nargs="*")
    check.set_defaults(func=_check)

    add_discover(s)
