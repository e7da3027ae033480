"""What the skills cost in every request, measured on the real CLIs offline: Claude Code and
Codex each run one prompt in a project with the skills installed (`fedhpc install-skills`)
and once without, against a fake model that records the requests. Each lists every skill's
name and description (at most 1.6 KB more per request) and loads no body until asked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fedhpc.cli.serve import install_skills
from tests.integration.agent_cli import claude_env, codex_config
from tests.integration.fake_models import FakeAnthropic, FakeOpenAI
from tests.integration.npm_tools import CLAUDE_CODE, CODEX, npm_tool
from tests.skill_claims import skills

LISTING_MAX = 1600
SKILLS = skills()


class _Recording:
    bodies: list[str]

    def _answer(
        self, path: str, body: dict[str, Any], headers: dict[str, str]
    ) -> tuple[int, str, bytes]:
        self.bodies.append(json.dumps(body, separators=(",", ":"), ensure_ascii=False))
        return super()._answer(path, body, headers)  # type: ignore[misc, no-any-return]


class RecordingAnthropic(_Recording, FakeAnthropic):
    def __init__(self) -> None:
        super().__init__()
        self.bodies = []


class RecordingOpenAI(_Recording, FakeOpenAI):
    def __init__(self) -> None:
        super().__init__()
        self.bodies = []


def _base_env(home: Path) -> dict[str, str]:
    return {
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(home),
    }


def _claude(exe: Path, root: Path, with_skills: bool) -> str:
    home, project = root / "home", root / "project"
    project.mkdir(parents=True)
    home.mkdir()
    if with_skills:
        install_skills([project / ".claude" / "skills"])
    with RecordingAnthropic() as fake:
        env = {
            **claude_env(home),
            **_base_env(home),
            "ANTHROPIC_BASE_URL": fake.url,
            "ANTHROPIC_API_KEY": "sk-fake",
        }
        out = subprocess.run(
            [str(exe), "-p", "hello", "--output-format", "json"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert out.returncode == 0, out.stdout + out.stderr
    return max(fake.bodies, key=len)  # the agent's turn, not a side query


def _codex(exe: Path, root: Path, with_skills: bool) -> str:
    home, project = root / "home", root / "project"
    project.mkdir(parents=True)
    (home / ".codex").mkdir(parents=True)
    if with_skills:
        install_skills([project / ".agents" / "skills"])
    with RecordingOpenAI() as fake:
        codex_config(home / ".codex", fake.url)
        env = {
            **_base_env(home),
            "CODEX_HOME": str(home / ".codex"),
            "FAKE_OPENAI_API_KEY": "sk-fake",
        }
        out = subprocess.run(
            [str(exe), "exec", "--json", "--skip-git-repo-check", "hello"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        assert out.returncode == 0, out.stdout + out.stderr
    return max(fake.bodies, key=len)


@pytest.mark.parametrize("cli", ["claude-code", "codex"])
def test_the_skills_add_at_most_1_6_kb_per_request_and_no_body(cli: str, tmp_path: Path) -> None:
    if cli == "claude-code":
        exe, run = npm_tool(*CLAUDE_CODE), _claude
    else:
        exe, run = npm_tool(*CODEX), _codex
    without = run(exe, tmp_path / "without", False)
    with_skills = run(exe, tmp_path / "with", True)
    for s in SKILLS:
        assert json.dumps(s.description)[1:-1] in with_skills, s.name  # listed
        first = max(s.body.splitlines(), key=len)  # a line of the body: loaded only on demand
        assert json.dumps(first)[1:-1] not in with_skills, s.name
    added = len(with_skills.encode()) - len(without.encode())
    sys.stderr.write(f"{cli}: the skills add {added} B per request\n")
    assert 0 < added <= LISTING_MAX, added
