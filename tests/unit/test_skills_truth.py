"""The skills say only what the code does: every tool, parameter, enum value, event kind, error
code and resource a skill names exists in the live server's tools/list (the real MCP server in
process, through a real client) or the code; the events it says wake the agent are exactly the
wake set; and the skills stay small enough to be listed in every request."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, get_type_hints

import pytest
from mcp import Client
from pydantic import BaseModel

from fedhpc.mcp_server import build_server
from fedhpc.mcp_server.tools import TOOLS, TRANSFER_EVENTS
from fedhpc.ops.continuations import DEFAULT_WAKE_EVENTS
from fedhpc.settings.daemon import DaemonSettings
from tests.skill_claims import (
    Skill,
    Vocabulary,
    check,
    error_codes,
    event_kinds,
    payload_keys,
    resume_claims,
    skills,
    state_values,
)

SKILLS = skills()
WAKES = set(DEFAULT_WAKE_EVENTS) | set(TRANSFER_EVENTS)  # a task's or group's; a move_data's

# Per-skill bytes each CLI adds around a name and description in its listing, calibrated on
# the real CLIs (issue 23: Claude Code 2.1.197 listed the four skills in +1,446 B, Codex 0.171.0
# in +1,643 B, for 1,422 B of names and descriptions): "- name: description\n" for Claude Code;
# Codex also names each SKILL.md's path (a project path of about 20 characters then).
OVERHEAD = {"Claude Code": 6, "Codex": 56}
LISTING_MAX = 1600
BODY_MAX = 2500


_NAMES = {fn.__name__ for fn in TOOLS}


def _answer_schema(fn: Any) -> dict[str, Any]:
    answer = get_type_hints(fn).get("return")
    return (
        answer.model_json_schema()
        if isinstance(answer, type) and issubclass(answer, BaseModel)
        else {}
    )


@pytest.fixture
async def vocab(tmp_path: Path) -> Vocabulary:
    server = build_server(DaemonSettings(home=tmp_path / "nodaemon"), autostart=False)
    async with Client(server, mode="legacy") as client:
        tools = (await client.list_tools()).tools
        fixed = {str(r.uri) for r in (await client.list_resources()).resources}
        templates = {
            t.uri_template for t in (await client.list_resource_templates()).resource_templates
        }
    return Vocabulary(
        inputs={t.name: t.input_schema for t in tools},
        # The answers' full models: tools/list types only an answer's own fields (its nested
        # records are plain objects there), but a skill may name a partition's or attempt's.
        outputs={fn.__name__: _answer_schema(fn) for fn in TOOLS}
        | {t.name: t.output_schema or {} for t in tools if t.name not in _NAMES},
        resources=fixed | templates,
        extra=state_values() | payload_keys(WAKES)[1],
    )


@pytest.mark.parametrize("skill", SKILLS, ids=[s.name for s in SKILLS])
async def test_every_name_a_skill_uses_exists_in_the_live_server(
    skill: Skill, vocab: Vocabulary
) -> None:
    assert check(skill, vocab, event_kinds(), error_codes()) == []


def test_the_checker_catches_what_drifts(vocab: Vocabulary) -> None:
    """The check is not vacuous: each kind of wrong claim is reported."""
    bad = Skill(
        "x",
        "d",
        '`submit_tsk(command=...)` `get_result(task_id, preview="head")` '
        '`replan(task_id, sites=[...])` `policy="fixed"` `task.pending_too_long` '
        "`fedhpc://jobs/{id}` `include_blockd`\n"
        '```json\n{"gpus": {"mn": 1}}\n```\n',
    )
    wrong = check(bad, vocab, event_kinds(), error_codes())
    for needle in (
        "no tool submit_tsk",
        "not one of",
        "replan has no parameter sites",
        '"fixed" is not one of',
        "no such event kind",
        "no such resource",
        "`include_blockd`",
        "'mn'",
    ):
        assert any(needle in w for w in wrong), (needle, wrong)


def _continue() -> Skill:
    return next(s for s in SKILLS if s.name == "fedhpc-continue")


def test_the_events_said_to_wake_the_agent_are_exactly_the_wake_set() -> None:
    skill = _continue()
    assert skill.events_on("Wakes you:") == WAKES
    silent = skill.events_on("Never wakes you:")
    assert silent, "the skill says which logged events do not wake the agent"
    assert not silent & WAKES


def test_the_resume_message_fields_the_skill_names_are_in_every_payload() -> None:
    """Checked on the bridge's own builder here, and on real deliveries in the integration
    tests (tests/integration/test_stage_in_wake.py, test_site_lost.py)."""
    every, some = payload_keys(WAKES)
    always, known = resume_claims()
    assert always <= every, always - every
    assert known <= some, known - some


def test_every_wake_event_has_a_step_in_the_continue_skill() -> None:
    steps = _continue().body.split("Wakes you:", 1)[1]
    for kind in WAKES:
        assert steps.count(f"`{kind}`") >= 2 or re.search(rf"`{re.escape(kind)}`.*:", steps), kind


@pytest.mark.parametrize("skill", SKILLS, ids=[s.name for s in SKILLS])
def test_a_skill_body_stays_under_2_5_kb(skill: Skill) -> None:
    assert len(skill.body.encode()) <= BODY_MAX


@pytest.mark.parametrize("cli", sorted(OVERHEAD))
def test_the_listing_each_cli_adds_to_every_request_stays_under_1_6_kb(cli: str) -> None:
    listing = sum(len(s.name) + len(s.description.encode()) + OVERHEAD[cli] for s in SKILLS)
    assert listing <= LISTING_MAX, (cli, listing)


def test_no_skill_names_a_single_claude_code_hook() -> None:
    """The hooks change (SessionStart, PreToolUse): skills point to the docs instead."""
    for s in SKILLS:
        assert "SessionStart" not in s.body and "PreToolUse" not in s.body, s.name


def test_the_next_steps_in_every_resume_name_real_tools_and_parameters(vocab: Vocabulary) -> None:
    """The resume message is an instruction too: its `next` steps are checked like a skill."""
    from fedhpc.bridge import build_payload

    steps: set[str] = set()
    for kind in sorted(event_kinds()):
        event = {
            "kind": kind,
            "id": "e1",
            "subject": "t1",
            "seq": 1,
            "created_at": "2026-11-30T00:00:00+00:00",
            "payload": {"task_id": "t1", "state": "failed"},
        }
        steps |= set(build_payload(event, [], delivery_id="d1")["next"])
    calls = " ".join(f"`{m}`" for s in steps for m in re.findall(r"\w+\([^)]*\)", s))
    assert calls
    assert check(Skill("next", "", calls), vocab, event_kinds(), error_codes()) == []
