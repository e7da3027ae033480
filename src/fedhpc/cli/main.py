"""Entry point of the `fedhpc` command."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points

from fedhpc import __version__
from fedhpc.exit_codes import run_command
from fedhpc.logs import configure_logging

__all__ = ["COMMANDS_GROUP", "LEAN", "build_parser", "main"]

# Commands that live outside the runtime package (the development tooling's `fedhpc devfed` and
# `fedhpc demo`, pyproject.toml) register here: each entry point names an `add_parser(sub)`.
COMMANDS_GROUP = "fedhpc.commands"
# The modules of fedhpc.cli whose `add_parser(sub)` adds the commands, in the help's order.
_MODULES = (
    "sites",
    "probe",
    "doctor",
    "connect",
    "daemon",
    "hooks",
    "login",
    "serve",
    "service",
    "relaying",
    "tasks",
    "pictures",
    "ui",
    "store",
)
# Commands agents start at every turn or tool call (`fedhpc serve` for a resumed Codex turn,
# `fedhpc hook ...`): only their own module is loaded, none of the other commands' imports
# (connect's discovery, the transports, the dev tooling's entry points): their start-up is
# on the path from a job's end to the resumed turn's first model request. `fedhpc daemon`,
# which an agent's first call starts, re-executes itself as `python -m fedhpc.daemon`: the
# whole parser before that cost 0.1 s of CPU more than its own module (0.57 s against 0.46 s).
LEAN = {
    "serve": "serve",
    "hook": "hooks",
    "deliveries": "hooks",
    "daemon": "daemon",
    "status": "daemon",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The `fedhpc` parser with every command; for a `command` of LEAN, with that one's
    module alone."""
    parser = argparse.ArgumentParser(
        prog="fedhpc",
        description="Operate several supercomputers as one workspace (profiles, probes, devfed).",
    )
    parser.add_argument("--version", action="version", version=f"fedhpc {__version__}")
    parser.add_argument("--log-level", default=None, help="stderr log level (default WARNING)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    lean = LEAN.get(command or "")
    for name in (lean,) if lean else _MODULES:
        importlib.import_module(f"fedhpc.cli.{name}").add_parser(sub)
    if not lean:
        _add_registered(sub)
    return parser


def _command(argv: Sequence[str]) -> str | None:
    """The command `argv` names (its first word that is no option or option value), or None
    when help or the version is asked for first."""
    words = iter(argv)
    for word in words:
        if word in ("-h", "--help", "--version"):
            return None
        if word == "--log-level":
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


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
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_command(words))
    args = parser.parse_args(words)
    configure_logging(args.log_level)
    return run_command(args)


if __name__ == "__main__":
    sys.exit(main())
