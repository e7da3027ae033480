"""`fedhpc serve` (the MCP server) and `fedhpc install-skills` (the agent skills)."""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio

from fedhpc.errors import UsageError
from fedhpc.exit_codes import run_command
from fedhpc.logs import configure_logging
from fedhpc.settings import MCP_TOKEN
from fedhpc.settings.daemon import DaemonSettings
from fedhpc.settings.others import CODEX_HOME

__all__ = ["add_parser", "main", "skills_source"]


def _serve(args: argparse.Namespace) -> int:
    # Imported here: the MCP SDK is only needed by this command.
    from fedhpc.mcp_server import build_server, run_http, run_stdio
    from fedhpc.mcp_server.service_http import run_service_http
    from fedhpc.service import load_service

    # Service mode: `--http` with a [service] section in the config (docs/service.md).
    service = load_service() if args.http else None
    server = build_server(
        DaemonSettings.from_env(),
        autostart=not args.no_autostart,
        daemon_wait_s=args.daemon_wait,
        service=service,
    )
    if service is not None:
        anyio.run(run_service_http, server, args.host, args.port, service)
    elif args.http:
        token = MCP_TOKEN.read() or None
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


# Where each client loads skills from (REFERENCE: Claude Code 2.1.197, Codex 0.171.0): a
# skill found in two of one client's folders is listed twice in every request.
def _levels(client: str) -> list[Path]:
    home = Path.home()
    if client == "Claude Code":
        return [Path(".claude/skills"), home / ".claude/skills"]
    codex_home = Path(CODEX_HOME.read() or home / ".codex")
    return [
        Path(".agents/skills"),
        Path(".codex/skills"),
        home / ".agents/skills",
        codex_home / "skills",
    ]


def _holders(folders: Sequence[Path], names: set[str]) -> list[Path]:
    """The distinct folders (by real path: a symlinked copy is one copy) holding our skills."""
    seen: dict[Path, Path] = {}
    for folder in folders:
        if any((folder / n / "SKILL.md").is_file() for n in names):
            seen.setdefault(folder.resolve(), folder)
    return list(seen.values())


def _install(args: argparse.Namespace) -> int:
    chosen = [("Claude Code", args.claude), ("Codex", args.codex)]
    targets = [(c, Path(d)) for c, d in chosen if d] or [
        ("Claude Code", Path(".claude/skills")),
        ("Codex", Path(".agents/skills")),
    ]
    names = sorted(p.name for p in skills_source().iterdir() if (p / "SKILL.md").is_file())
    written = install_skills([t for _, t in targets])
    lines = [
        f"installed {len(names)} skills for {client} in {target.resolve()}: {', '.join(names)}"
        for client, target in targets
    ]
    warnings = []
    for client, target in targets:
        holders = _holders([target, *_levels(client)], set(names))
        if len(holders) > 1:
            where = " and ".join(str(h.resolve()) for h in holders)
            warnings.append(
                f"{client} now finds the fedhpc skills in {where}: it lists every skill twice "
                f"in each request. Keep one: rm -r {holders[-1].resolve()}/fedhpc-*"
            )
    hooks = (
        "Claude Code resumes your session when work ends only with the fedhpc hooks "
        "from docs/continuation.md in .claude/settings.json; Codex needs none."
    )
    if args.json:
        print(
            json.dumps(
                {
                    "installed": [str(p) for p in written],
                    "targets": [
                        {"client": c, "folder": str(t.resolve()), "skills": names}
                        for c, t in targets
                    ],
                    "warnings": warnings,
                    "hooks": hooks,
                },
                indent=2,
            )
        )
    else:
        for line in lines:
            print(line)
        print(hooks)
        for w in warnings:
            print(f"warning: {w}", file=sys.stderr)
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser(
        "serve",
        help="the MCP server for coding agents (stdio; --http for streamable HTTP)",
        description="Register with: claude mcp add fedhpc -- fedhpc serve",
    )
    s.add_argument("--http", action="store_true", help="serve streamable HTTP at /mcp")
    s.add_argument(
        "--host", default="127.0.0.1", help=f"HTTP address; non-loopback needs ${MCP_TOKEN.name}"
    )
    s.add_argument("--port", type=int, default=8765, help="HTTP port (default 8765)")
    s.add_argument(
        "--no-autostart", action="store_true", help="do not start the daemon when it is down"
    )
    s.add_argument(
        "--daemon-wait",
        type=float,
        default=0.0,
        metavar="S",
        help="with --no-autostart: wait up to S seconds for a daemon that does not answer "
        "(one restarting) before answering daemon_unavailable (default 0)",
    )
    s.set_defaults(func=_serve)
    i = sub.add_parser(
        "install-skills",
        help="copy the agent skills to .claude/skills and .agents/skills",
        description="With no flag, installs into ./.claude/skills and ./.agents/skills. Install "
        "each client's skills at one level only (project or user): both lists every skill "
        "twice. Claude Code resumes also need the hooks from docs/continuation.md.",
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
    return run_command(args)
