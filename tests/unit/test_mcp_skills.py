"""The shipped skills follow the agentskills.io frontmatter, and `install-skills` places them
where Claude Code and Codex load them."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from fedhpc.cli import serve
from fedhpc.cli.serve import install_skills, skills_source

NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
SKILLS = sorted(p.parent for p in skills_source().glob("*/SKILL.md"))


def _frontmatter(path: Path) -> dict[str, str]:
    text = path.read_text()
    assert text.startswith("---\n")
    block = text.split("---\n")[1]
    return dict(line.split(": ", 1) for line in block.strip().splitlines())


def test_the_skills_cover_the_agent_loop() -> None:
    names = {p.name for p in SKILLS}
    assert names == {"fedhpc-inspect", "fedhpc-envelopes", "fedhpc-submit", "fedhpc-continue"}
    submit = (skills_source() / "fedhpc-submit" / "SKILL.md").read_text()
    assert "submit_group" in submit
    assert "move_data" in submit
    assert "stage_in" in submit
    assert "not yet available" not in submit


@pytest.mark.parametrize("folder", SKILLS, ids=[p.name for p in SKILLS])
def test_frontmatter_names_the_folder_and_describes_within_1024_chars(folder: Path) -> None:
    meta = _frontmatter(folder / "SKILL.md")
    assert set(meta) <= {"name", "description", "license", "compatibility", "metadata",
                         "allowed-tools"}  # fmt: skip
    assert meta["name"] == folder.name
    assert NAME.match(meta["name"])
    assert len(meta["name"]) <= 64
    assert 0 < len(meta["description"]) <= 1024
    assert "Use when" in meta["description"]


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    serve.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


def test_install_skills_copies_to_both_clients_and_replaces_its_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    claude, codex = tmp_path / "c" / ".claude" / "skills", tmp_path / "x" / ".agents" / "skills"
    (claude / "fedhpc-submit").mkdir(parents=True)
    (claude / "fedhpc-submit" / "SKILL.md").write_text("old")
    (claude / "mine").mkdir()
    assert _run(["install-skills", "--claude", str(claude), "--codex", str(codex), "--json"]) == 0
    installed = json.loads(capsys.readouterr().out)["installed"]
    assert len(installed) == 2 * len(SKILLS)
    for target in (claude, codex):
        for skill in SKILLS:
            copied = target / skill.name / "SKILL.md"
            assert copied.read_text() == (skill / "SKILL.md").read_text()
    assert (claude / "mine").is_dir()  # someone else's skill is left alone


def test_install_skills_defaults_to_the_project_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert _run(["install-skills"]) == 0
    assert "installed .claude/skills/fedhpc-inspect" in capsys.readouterr().out
    assert (tmp_path / ".agents" / "skills" / "fedhpc-continue" / "SKILL.md").is_file()
    assert install_skills([tmp_path / "again"])  # idempotent, returns what it wrote
