"""Entry point of the `fedhpc` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points

from fedhpc import __version__
from fedhpc.cli import (
    connect,
    daemon,
    doctor,
    hooks,
    login,
    pictures,
    probe,
    serve,
    sites,
    store,
    tasks,
    ui,
)
from fedhpc.exit_codes import run_command
from fedhpc.logs import configure_logging

__all__ = ["COMMANDS_GROUP", "build_parser", "main"]

# Commands that live outside the runtime package (the development tooling's `fedhpc devfed` and
# `fedhpc demo`, pyproject.toml) register here: each entry point names an `add_parser(sub)`.
COMMANDS_GROUP = "fedhpc.commands"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fedhpc",
        description="Operate several supercomputers as one workspace (profiles, probes, devfed).",
    )
    parser.add_argument("--version", action="version", version=f"fedhpc {__version__}")
    parser.add_argument("--log-level", default=None, help="stderr log level (default WARNING)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sites.add_parser(sub)
    probe.add_parser(sub)
    doctor.add_parser(sub)
    connect.add_parser(sub)
    daemon.add_parser(sub)
    hooks.add_parser(sub)
    login.add_parser(sub)
    serve.add_parser(sub)
    tasks.add_parser(sub)
    pictures.add_parser(sub)
    ui.add_parser(sub)
    store.add_parser(sub)
    _add_registered(sub)
    return parser


def _add_registered(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The commands of the `fedhpc.commands` entry points, by name. One that cannot be loaded
    is named on stderr and left out; the other commands still work."""
    for ep in sorted(entry_points(group=COMMANDS_GROUP), key=lambda e: e.name):
        try:
            ep.load()(sub)
        except Exception as exc:  # a broken plugin must not take the other commands down
            print(
                f"fedhpc: command {ep.name!r} ({ep.value}) could not be loaded: {exc}",
                file=sys.stderr,
            )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    return run_command(args)


if __name__ == "__main__":
    sys.exit(main())
