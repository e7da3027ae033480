"""Faces reach sites and the store only through the daemon: no CLI module imports the store, an
adapter or a daemon service, and every command that goes around the daemon (a diagnostic that
talks to a site itself, onboarding, the store read while no daemon runs) says so in its help."""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

import fedhpc.cli
from fedhpc.cli.main import build_parser

CLI = Path(fedhpc.cli.__file__).parent
AROUND_THE_DAEMON = (
    "fedhpc.store",
    "fedhpc.adapters",
    "fedhpc.collector",
    "fedhpc.orchestrator",
    "fedhpc.transfer",
)
# Modules that reach a site or the store themselves, for a command that must bypass the daemon.
BYPASS = ("fedhpc.onboard", "fedhpc.daemon.offline", "fedhpc.daemon.store_admin")
GO_AROUND = (
    "probe",
    "doctor",
    "connect",
    "sites discover",
    "status",
    "store status",
    "store migrate",
    "store export",
    "store import",
)
SAYS_SO = ("not through the daemon", "reads the daemon's store directly")


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, at module level or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


def _face_modules() -> list[Path]:
    return [p for p in sorted(CLI.glob("*.py")) if p.stem != "demo"]  # the dev demo moves out


def _commands(
    parser: argparse.ArgumentParser, prefix: str = ""
) -> list[tuple[str, argparse.ArgumentParser]]:
    out: list[tuple[str, argparse.ArgumentParser]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.append((f"{prefix}{name}", sub))
                out += _commands(sub, f"{prefix}{name} ")
    return out


def test_no_cli_module_imports_the_store_an_adapter_or_a_daemon_service() -> None:
    reaching = {
        p.name: sorted(m for m in _imports(p) if m.startswith(AROUND_THE_DAEMON))
        for p in _face_modules()
    }
    assert {k: v for k, v in reaching.items() if v} == {}


def test_each_command_that_goes_around_the_daemon_says_so_in_its_help() -> None:
    commands = dict(_commands(build_parser()))
    for name in GO_AROUND:
        help_text = " ".join((commands[name].description or "").split())
        assert any(s in help_text for s in SAYS_SO), f"`fedhpc {name} --help` does not say so"
    # a module that reaches a site or the store itself serves only commands listed here
    bypassing = {
        f"fedhpc.cli.{p.stem}"
        for p in _face_modules()
        if any(m.startswith(BYPASS) for m in _imports(p))
    }
    listed = {commands[name].get_default("func").__module__ for name in GO_AROUND}
    assert bypassing <= listed, sorted(bypassing - listed)


def test_the_cli_modules_are_importable_without_the_store() -> None:
    """Importing a face loads no store or site adapter (they come only through the daemon)."""
    mods = ", ".join(f"fedhpc.cli.{p.stem}" for p in _face_modules() if p.stem != "__init__")
    code = (
        f"import sys, {mods}\n"
        "print(sorted(m for m in ('fedhpc.store', 'fedhpc.collector', 'fedhpc.orchestrator', "
        "'aiosqlite') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
