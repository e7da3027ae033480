"""Entry point of the `fedhpc` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from fedhpc import __version__
from fedhpc.exit_codes import run_command
from fedhpc.logs import configure_logging

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    from fedhpc.cli import (
        connect,
        daemon,
        demo,
        doctor,
        hooks,
        login,
        pictures,
        probe,
        serve,
        sites,
        tasks,
        ui,
    )
    from fedhpc.devfed import cli as devfed_cli

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
    demo.add_parser(sub)
    daemon.add_parser(sub)
    hooks.add_parser(sub)
    login.add_parser(sub)
    serve.add_parser(sub)
    tasks.add_parser(sub)
    pictures.add_parser(sub)
    ui.add_parser(sub)
    devfed_cli.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    return run_command(args)


if __name__ == "__main__":
    sys.exit(main())
