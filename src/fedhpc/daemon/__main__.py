"""`python -m fedhpc.daemon [--once] [--refresh S]`: the daemon in a lean process.

structlog imports `rich` when it is installed (it is: `mcp` depends on it), which costs the
daemon about 5 MB of RSS for console rendering it never uses; the daemon logs key-value lines.
Blocking the import before anything loads keeps the daemon under its memory budget. `fedhpc
daemon` re-executes itself this way, and `start_daemon` starts it so directly (the CLI's
parser and imports cost as much CPU again as the daemon's own). With `[service.facade]` in the
user's config it re-executes as `python -m fedhpc.service.daemon` (same pid), the daemon that
holds each person's tokens; typed errors exit as every command's do.
"""

from __future__ import annotations

import sys

sys.modules.setdefault("rich", None)  # type: ignore[arg-type]

# Imported after blocking rich, on purpose.
import argparse  # noqa: E402
import functools  # noqa: E402
import os  # noqa: E402
from collections.abc import Callable  # noqa: E402

import anyio  # noqa: E402

from fedhpc.daemon.server import run_daemon  # noqa: E402
from fedhpc.exit_codes import run_command  # noqa: E402
from fedhpc.globus_auth.people import PersonTokens  # noqa: E402
from fedhpc.logs import configure_logging  # noqa: E402
from fedhpc.profiles.loader import load_user_config  # noqa: E402
from fedhpc.settings.daemon import DaemonSettings  # noqa: E402

FACADE_DAEMON = "fedhpc.service.daemon"  # a module name, run, never imported (layers)


def _run(args: argparse.Namespace) -> int:
    service = load_user_config().service if args.people is None else None
    if service is not None and service.facade is not None:
        os.execv(sys.executable, [sys.executable, "-m", FACADE_DAEMON, *args.argv])  # noqa: S606
    settings = DaemonSettings.from_env(refresh_s=args.refresh)
    anyio.run(functools.partial(run_daemon, settings, once=args.once, people=args.people))
    return 0


def main(
    argv: list[str] | None = None, *, people: Callable[[], PersonTokens | None] | None = None
) -> int:
    """`people`: makes each person's tokens for per-person sites (`fedhpc.service.daemon`)."""
    parser = argparse.ArgumentParser(prog="python -m fedhpc.daemon")
    parser.add_argument("--once", action="store_true", help="run one control cycle and exit")
    parser.add_argument("--refresh", type=float, default=None, help="seconds between refreshes")
    args = parser.parse_args(argv)
    configure_logging()
    words = sys.argv[1:] if argv is None else argv
    return run_command(argparse.Namespace(func=_run, people=people, argv=words, **vars(args)))


if __name__ == "__main__":
    sys.exit(main())
