"""Claude Code (npm @anthropic-ai/claude-code, offline, no login, isolated HOME) registers
`fedhpc serve` and its health check connects to it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.integration.mcp_support import serve_argv
from tests.integration.npm_tools import CLAUDE_CODE, npm_tool


@pytest.fixture(scope="module")
def claude() -> Path:
    return npm_tool(*CLAUDE_CODE)


def _claude(exe: Path, home: Path, project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
    }
    return subprocess.run(
        [str(exe), *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path, Path]:
    home, project, fedhome = tmp_path / "home", tmp_path / "project", tmp_path / "fedhpc"
    for d in (home, project):
        d.mkdir()
    return home, project, fedhome


def test_claude_mcp_add_then_list_shows_fedhpc_connected(
    claude: Path, dirs: tuple[Path, Path, Path]
) -> None:
    home, project, fedhome = dirs
    add = _claude(
        claude,
        home,
        project,
        "mcp",
        "add",
        "fedhpc",
        "-e",
        f"FEDHPC_HOME={fedhome}",
        "--",
        *serve_argv(),
    )
    assert add.returncode == 0, add.stderr
    listed = _claude(claude, home, project, "mcp", "list")
    assert listed.returncode == 0, listed.stderr
    line = next(x for x in listed.stdout.splitlines() if x.startswith("fedhpc:"))
    assert "Connected" in line, listed.stdout
    assert not (fedhome / "daemon.sock").exists()  # a health check starts no daemon


def test_a_project_mcp_json_entry_connects_once_approved(
    claude: Path, dirs: tuple[Path, Path, Path]
) -> None:
    home, project, fedhome = dirs
    argv = serve_argv()
    entry = {
        "type": "stdio",
        "command": argv[0],
        "args": argv[1:],
        "env": {"FEDHPC_HOME": str(fedhome)},
    }
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"fedhpc": entry}}))
    (home / ".claude").mkdir()
    (home / ".claude" / "settings.json").write_text(
        json.dumps({"enabledMcpjsonServers": ["fedhpc"]})
    )
    listed = _claude(claude, home, project, "mcp", "list")
    assert listed.returncode == 0, listed.stderr
    line = next(x for x in listed.stdout.splitlines() if x.startswith("fedhpc:"))
    assert "Connected" in line, listed.stdout
