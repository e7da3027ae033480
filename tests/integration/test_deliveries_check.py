"""`fedhpc deliveries check` against the real Claude Code CLI: it starts the runtime the way
the daemon would (the `[resume]` binary and environment, no model request) and says what is
missing, with the fix."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.npm_tools import CLAUDE_CODE, npm_tool

VENV_BIN = str(Path(sys.executable).parent)


@pytest.fixture(scope="module")
def claude() -> Path:
    return npm_tool(*CLAUDE_CODE)


def _check(home: Path, config: str) -> tuple[int, dict[str, Any]]:
    (home / "config.toml").write_text(config)
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "FEDHPC_HOME": str(home),
        "ANTHROPIC_API_KEY": "sk-in-the-callers-env-only",
    }
    out = subprocess.run(
        [f"{VENV_BIN}/fedhpc", "deliveries", "check", "--runtime", "claude-code", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return out.returncode, json.loads(out.stdout)


def test_check_reports_missing_credentials_with_the_fix_then_ok(
    claude: Path, tmp_path: Path
) -> None:
    home = tmp_path / "h"
    home.mkdir()
    base = f'[resume.claude-code]\nbinary = "{claude}"\n'
    rc, body = _check(home, base)  # the caller's key is not the resume's
    (report,) = body["runtimes"]
    assert rc == 1 and report["ok"] is False
    assert any("ANTHROPIC_API_KEY" in fix and "env_file" in fix for fix in report["fix"])
    secret = home / "claude.env"
    secret.write_text("ANTHROPIC_API_KEY=sk-fake-for-check\n")
    rc, body = _check(home, base + f'env_file = "{secret}"\n')
    (report,) = body["runtimes"]
    assert rc == 0 and report["ok"] is True, report
    assert "2.1.197" in report["detail"]
    assert "sk-fake-for-check" not in json.dumps(body)
    rc, body = _check(home, '[resume.claude-code]\nbinary = "/nonexistent/claude"\n')
    (report,) = body["runtimes"]
    assert rc == 1 and "not found" in report["detail"]
    assert "[resume.claude-code]" in report["fix"][0]
