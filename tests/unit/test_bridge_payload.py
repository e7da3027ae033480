"""The continuation payload: compact, capped, and free of anything secret."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from fedhpc.bridge import HARD_CAP, TARGET, build_payload, prompt_text
from fedhpc.cli.hooks import user_prompt_submit
from fedhpc.ops.continuations import ContinuationSpec, Runtime


def _event(**payload: object) -> dict[str, object]:
    return {"kind": "task.terminal", "id": "ev_1", "subject": "t1", "seq": 1,
            "created_at": datetime(2026, 11, 29, tzinfo=UTC).isoformat(),
            "payload": {"task_id": "t1", "state": "completed", "result": "fedhpc://tasks/t1",
                        **payload}}  # fmt: skip


def _attempt(n: int) -> dict[str, object]:
    return {"n": n, "site": "devdelta", "partition": "gpuA100x4", "state": "failed",
            "job_id": str(1000 + n), "wait_s": 1.5, "runtime_s": 30.0, "exit_code": 1,
            "stdout": "/scratch/x.out", "account": "secret-account-name"}  # fmt: skip


def test_payload_names_the_event_the_result_and_the_next_actions() -> None:
    p = build_payload(_event(site="devdelta"), [_attempt(1)], delivery_id="d1")
    assert p["event"] == "task.terminal"
    assert p["result"] == "fedhpc://tasks/t1"
    assert p["attempts"][0]["job_id"] == "1001"
    assert "account" not in p["attempts"][0]  # only what the agent needs to decide
    assert p["next"][0].startswith("get_result")
    assert len(json.dumps(p)) < TARGET


def test_payload_stays_under_the_cap_whatever_the_event_holds() -> None:
    huge = _event(reason="x" * 50_000, counts={f"k{i}": i for i in range(2000)})
    p = build_payload(huge, [_attempt(i) for i in range(100)], delivery_id="d1")
    assert len(json.dumps(p, separators=(",", ":"))) <= HARD_CAP
    assert p["result"] == "fedhpc://tasks/t1"
    assert len(prompt_text(p).encode()) <= HARD_CAP + 400


def test_a_planted_secret_in_the_environment_never_reaches_a_payload(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    canary = "CANARY-SECRET-7f3a"
    monkeypatch.setenv("GLOBUS_COMPUTE_CLIENT_SECRET", canary)
    monkeypatch.setenv("ANTHROPIC_API_KEY", canary)
    p = build_payload(_event(), [_attempt(1)], delivery_id="d1")
    assert canary not in json.dumps(p)
    assert canary not in prompt_text(p)


def test_continuation_specs_name_what_each_runtime_needs() -> None:
    with pytest.raises(ValueError, match="needs command"):
        ContinuationSpec(runtime=Runtime.COMMAND)
    with pytest.raises(ValueError, match="needs session_id"):
        ContinuationSpec(runtime=Runtime.CODEX)
    with pytest.raises(ValueError, match="session_id or cwd"):
        ContinuationSpec(runtime=Runtime.CLAUDE_CODE)
    with pytest.raises(ValueError, match="session_id"):
        ContinuationSpec(runtime=Runtime.CODEX, session_id="x; rm -rf /")
    assert ContinuationSpec(runtime=Runtime.CLAUDE_CODE, cwd="/work/p").events


def test_user_prompt_submit_hook_injects_and_empties_the_inbox(tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "s1.jsonl").write_text('{"event":"task.terminal"}\n')
    out = user_prompt_submit('{"session_id": "s1", "prompt": "hi"}', tmp_path)
    assert out is not None
    body = json.loads(out)["hookSpecificOutput"]
    assert body["hookEventName"] == "UserPromptSubmit"
    assert "task.terminal" in body["additionalContext"]
    assert not (inbox / "s1.jsonl").exists()
    assert user_prompt_submit('{"session_id": "s1"}', tmp_path) is None
