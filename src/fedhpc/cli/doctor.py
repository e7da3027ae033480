"""`fedhpc doctor [SITE...]`: one check list per site, pass/fail with the fix; exit 0 only when
everything passed."""

from __future__ import annotations

import argparse
import difflib
import json

import anyio

from fedhpc.errors import UsageError
from fedhpc.onboard.doctor import Check, check_sites, resume_checks
from fedhpc.profiles import load_federation, load_user_config
from fedhpc.settings import fedhpc_home

__all__ = ["add_parser", "print_checks", "run_doctor"]

_MARK = {"pass": "ok  ", "fail": "FAIL", "skip": "skip"}


def print_checks(checks: list[Check]) -> None:
    if not checks:
        return
    print(f"{checks[0].site}:")
    for c in checks:
        print(f"  {_MARK[c.status]} {c.name}: {c.detail}")
        if c.status == "fail" and c.fix:
            print(f"       fix: {c.fix}")


def run_doctor(names: list[str], *, as_json: bool = False, resume: bool = True) -> int:
    config = load_user_config()
    sites = load_federation(config)
    unknown = [n for n in names if n not in sites]
    if unknown:
        close = sorted({m for n in unknown for m in difflib.get_close_matches(n, sites, n=2)})
        mean = f"Did you mean {' or '.join(close)}? " if close else ""
        raise UsageError(
            f"not configured: {', '.join(unknown)}",
            hint=f"{mean}Add a site with `fedhpc connect SITE` or "
            "`fedhpc sites discover SITE ...`.",
        )
    chosen = [sites[n] for n in names] if names else list(sites.values())
    if not chosen:
        raise UsageError("no site is configured", hint="Add one: `fedhpc connect SITE`.")
    results = anyio.run(check_sites, chosen, None if as_json else print_checks)
    pairs = (("claude-code", config.resume.claude_code), ("codex", config.resume.codex))
    configured = tuple(name for name, runtime in pairs if runtime is not None)
    extra = resume_checks(fedhpc_home(), configured) if resume and configured else []
    if extra and not as_json:
        print_checks(extra)
    every = [c for checks in results.values() for c in checks] + extra
    failed = [c for c in every if c.status == "fail"]
    if as_json:
        print(
            json.dumps(
                {
                    "ok": not failed,
                    "sites": {
                        name: [c.as_dict() for c in checks] for name, checks in results.items()
                    },
                    "resume": [c.as_dict() for c in extra],
                },
                indent=2,
            )
        )
    else:
        print(f"{len(failed)} check(s) failed" if failed else "all checks passed")
    return 1 if failed else 0


def _run(args: argparse.Namespace) -> int:
    return run_doctor(list(args.sites), as_json=args.json)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "doctor",
        help="check each configured site end to end, with fixes",
        description=(
            "Check each configured site end to end, each failed check with its fix. A "
            "diagnostic: it talks to each site directly from this process, not through the "
            "daemon, so it works while the daemon is stopped."
        ),
    )
    p.add_argument("sites", nargs="*", help="default: every configured site")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_run)
