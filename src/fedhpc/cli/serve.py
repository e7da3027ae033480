"""`fedhpc serve` (the MCP server) and `fedhpc install-skills` (the agent skills)."""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import anyio

from fedhpc.cli.run import run
from fedhpc.errors import UsageError
from fedhpc.logs import configure_logging

__all__ = ["add_parser", "main", "skills_source"]

TOKEN_ENV = "FEDHPC_MCP_TOKEN"  # noqa: S105 (the variable's name, not a secret)


def _serve(args: argparse.Namespace) -> int:
    # Imported here: the MCP SDK is only needed by this command.
    from fedhpc.daemon.settings import DaemonSettings
    from fedhpc.mcp_server import build_server, run_http, run_stdio

    server = build_server(DaemonSettings.from_env(), autostart=not args.no_autostart)
    if args.http:
        token = os.environ.get(TOKEN_ENV) or None
        anyio.run(functools.partial(run_http, server, args.host, args.port, token))
    else:
        anyio.run(run_stdio, server)
    return 0


def skills_source() -> Path:
    """The shipped skills: inside the package when installed, else the repository's folder."""
    here = Path(__file__).resolve()
    for candidate in (here.parents[1] / "skills", here.parents[3] / "skills"):
        if candidate.is_dir():
            return candidate
    raise UsageError("the fedhpc skills are not installed with this copy of fedhpc")


def install_skills(targets: Sequence[Path]) -> list[Path]:
    """Copy every skill folder into each target (replacing fedhpc's own, nothing else)."""
    source = skills_source()
    written = []
    for target in targets:
        target.mkdir(parents=True, exist_ok=True)
        for skill in sorted(p for p in source.iterdir() if (p / "SKILL.md").is_file()):
            dest = target / skill.name
            if dest.is_symlink() or dest.is_file():
                dest.unlink()
            shutil.copytree(skill, dest, dirs_exist_ok=True)
            written.append(dest)
    return written


def _install(args: argparse.Namespace) -> int:
    chosen = [Path(d) for d in (args.claude, args.codex) if d]
    targets = chosen or [Path(".claude/skills"), Path(".agents/skills")]
    written = install_skills(targets)
    if args.json:
        print(json.dumps({"installed": [str(p) for p in written]}, indent=2))
    else:
        for path in written:
            print(f"installed {path}")
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser(
        "serve",
        help="the MCP server for coding agents (stdio; --http for streamable HTTP)",
        description="Register with: claude mcp add fedhpc -- fedhpc serve",
    )
    s.add_argument("--http", action="store_true", help="serve streamable HTTP at /mcp")
    s.add_argument(
        "--host", default="127.0.0.1", help=f"HTTP address; non-loopback needs ${TOKEN_ENV}"
    )
    s.add_argument("--port", type=int, default=8765, help="HTTP port (default 8765)")
    s.add_argument(
        "--no-autostart", action="store_true", help="do not start the daemon when it is down"
    )
    s.set_defaults(func=_serve)
    i = sub.add_parser(
        "install-skills",
        help="copy the agent skills to .claude/skills and .agents/skills",
        description="With no flag, installs into ./.claude/skills and ./.agents/skills.",
    )
    i.add_argument("--claude", metavar="DIR", help="Claude Code skills folder")
    i.add_argument("--codex", metavar="DIR", help="Codex skills folder")
    i.add_argument("--json", action="store_true", help="list what was installed as JSON")
    i.set_defaults(func=_install)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m fedhpc.mcp_server`: `fedhpc serve` without the rest of the CLI."""
    parser = argparse.ArgumentParser(prog="fedhpc-serve")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["serve", *(argv or [])])
    configure_logging()
    return run(args)
