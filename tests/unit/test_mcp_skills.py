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
    assert set(meta) <= {
        "name",
        "description",
        "license",
        "compatibility",
        "metadata",
        "allowed-tools",
    }
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


@pytest.fixture
def user_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder as cwd and an empty home of its own: the user-level folders are ours."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("CODEX_HOME", raising=False)
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    return home


def test_install_skills_defaults_to_the_project_folders_and_says_what_went_where(
    user_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(["install-skills"]) == 0
    out = capsys.readouterr()
    project = Path.cwd()
    names = ", ".join(p.name for p in SKILLS)
    assert f"installed 4 skills for Claude Code in {project}/.claude/skills: {names}" in out.out
    assert f"installed 4 skills for Codex in {project}/.agents/skills: {names}" in out.out
    assert "hooks from docs/continuation.md" in out.out
    assert out.err == ""  # one level only: no warning
    assert (project / ".agents" / "skills" / "fedhpc-continue" / "SKILL.md").is_file()
    assert install_skills([project / "again"])  # idempotent, returns what it wrote


def test_install_skills_warns_when_one_client_would_list_every_skill_twice(
    user_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(["install-skills", "--claude", str(user_home / ".claude/skills")]) == 0
    assert capsys.readouterr().err == ""
    assert _run(["install-skills", "--json"]) == 0  # now the project level as well
    answer = json.loads(capsys.readouterr().out)
    (warning,) = answer["warnings"]  # Claude Code: both levels; Codex: project only
    assert warning.startswith("Claude Code now finds the fedhpc skills in")
    assert str(user_home / ".claude/skills") in warning
    assert "lists every skill twice" in warning
    assert [t["client"] for t in answer["targets"]] == ["Claude Code", "Codex"]
    assert "docs/continuation.md" in answer["hooks"]


def test_a_symlinked_codex_folder_is_one_copy_not_a_double_listing(
    user_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install_skills([Path(".claude/skills")])
    Path(".agents").mkdir()
    Path(".agents/skills").symlink_to("../.claude/skills")
    (user_home / ".codex").mkdir()
    (user_home / ".codex" / "skills").symlink_to(Path.cwd() / ".claude/skills")
    assert _run(["install-skills", "--codex", ".agents/skills"]) == 0
    assert capsys.readouterr().err == ""
