"""`fedhpc sites`: list, show and check site profiles."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from fedhpc.cli.discover import add_discover
from fedhpc.cli.table import table_lines
from fedhpc.domain.site import SiteProfile
from fedhpc.errors import NotFound
from fedhpc.profiles import load_profile, load_profiles, load_user_config
from fedhpc.profiles.loader import user_profile_dirs

__all__ = ["add_parser"]

CENTER_WIDTH = 24  # `sites list` fits 100 columns; --json and `sites show` have it whole
GPUS_WIDTH = 18


def _gpus(profile: SiteProfile) -> list[str]:
    """The node shapes with accelerators, e.g. `4xa100`, each once."""
    return sorted(
        {
            f"{p.node.accelerator.count}x{p.node.accelerator.type}"
            for p in profile.partitions
            if p.node.accelerator
        }
    )


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _list(args: argparse.Namespace) -> int:
    """One line per profile, narrow enough for a terminal (the center cut, the partitions
    counted); `--json` has every field whole, `sites show SITE` everything."""
    config = load_user_config()
    profiles = load_profiles(user_profile_dirs(config))
    entries: list[dict[str, Any]] = []
    for name, p in sorted(profiles.items()):
        configured = "yes" if name in config.sites else ("devfed" if p.local_test else "-")
        entries.append(
            {
                "site": name,
                "center": p.center,
                "dialect": p.dialect,
                "arch": p.arch.value,
                "partitions": [x.name for x in p.partitions],
                "blocked_partitions": list(p.blocked_partitions),
                "gpus": _gpus(p),
                "configured": configured,
            }
        )
    if args.json:
        print(json.dumps(entries, indent=2))
        return 0
    rows = [("SITE", "CENTER", "SCHED", "ARCH", "PARTITIONS", "GPUS", "CONFIGURED")]
    for e in entries:
        parts = e["partitions"]
        usable = len(parts) - len(set(parts) & set(e["blocked_partitions"]))
        rows.append(
            (
                e["site"],
                _short(e["center"], CENTER_WIDTH),
                e["dialect"],
                e["arch"],
                f"{len(parts)} ({usable} usable)",
                _short(",".join(e["gpus"]) or "-", GPUS_WIDTH),
                e["configured"],
            )
        )
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
    ls = s.add_parser("list", help="every shipped and user profile")
    ls.add_argument("--json", action="store_true", help="as JSON, every field whole")
    ls.set_defaults(func=_list)
    show = s.add_parser("show", help="one profile as JSON")
    show.add_argument("site")
    show.set_defaults(func=_show)
    check = s.add_parser("check", help="validate profile files (default: all loaded ones)")
    check.add_argument("files", nargs="*")
    check.set_defaults(func=_check)

    add_discover(s)
