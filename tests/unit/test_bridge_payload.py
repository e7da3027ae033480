"""The continuation payload: compact, capped, ordered, never re-sent, free of anything secret."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from fedhpc.bridge import HARD_CAP, SINGLE_CAP, TARGET, build_payload, prompt_text
from fedhpc.bridge.payload import late_payload, nudge_text
from fedhpc.cli.hooks import user_prompt_submit
from fedhpc.ops.continuations import ContinuationSpec, Runtime

PAYLOAD_MARK = '"fedhpc":"continuation"'


def _event(**payload: object) -> dict[str, object]:
    return {
        "kind": "task.terminal",
        "id": "ev_1",
        "subject": "t1",
        "seq": 1,
        "created_at": datetime(2026, 11, 29, tzinfo=UTC).isoformat(),
        "payload": {
            "task_id": "t1",
            "state": "completed",
            "result": "fedhpc://tasks/t1",
            **payload,
        },
    }


def _attempt(n: int) -> dict[str, object]:
    return {
        "n": n,
        "site": "devdelta",
        "partition": "gpuA100x4",
        "state": "failed",
        "job_id": str(1000 + n),
        "wait_s": 1.5,
        "runtime_s": 30.0,
        "exit_code": 1,
        "stdout": "/scratch/x.out",
        "account": "secret-account-name",
    }


def test_payload_names_the_event_the_task_and_the_next_action() -> None:
    p = build_payload(_event(site="devdelta"), [_attempt(1)], delivery_id="d1")
    assert p["event"] == "task.terminal"
    assert p["task_id"] == "t1"
    assert "subject" not in p  # the task id says it
    assert "result" not in p  # the default reference follows from the task id
    assert p["attempt"]["job_id"] == "1001"
    assert "account" not in p["attempt"]  # only what the agent needs to decide
    assert p["next"][0].startswith("get_result")
    assert len(json.dumps(p)) < TARGET


def test_a_single_task_terminal_event_is_at_most_600_bytes_as_the_model_sees_it() -> None:
    event = {
        "kind": "task.terminal",
        "id": "ev_01HZX8V0Q2W3E4R5T6Y7U8I9O0",
        "seq": 123456,
        "subject": "t-01hzx8v0q2w3e4r5t6y7u8i9o0",
        "created_at": "2026-11-30T12:00:00+00:00",
        "payload": {
            "task_id": "t-01hzx8v0q2w3e4r5t6y7u8i9o0",
            "state": "completed",
            "site": "devperlmutter",
            "attempt": 3,
            "job_id": "1234567",
            "result": "fedhpc://tasks/t-01hzx8v0q2w3e4r5t6y7u8i9o0",
        },
    }
    attempt = {
        "n": 3,
        "site": "devperlmutter",
        "partition": "gpu_ss11",
        "state": "completed",
        "job_id": "1234567",
        "wait_s": 12.5,
        "runtime_s": 3601.25,
        "exit_code": 0,
    }
    did = "d123456-ct-01hzx8v0q2w3e4r5t6y7u8i9o0-0123456789"
    text = prompt_text([build_payload(event, [attempt], delivery_id=did)])
    assert len(text.encode()) <= SINGLE_CAP, len(text.encode())
    assert did in text and "get_result" in text


def test_events_coalesced_into_one_resume_keep_their_order_and_each_appears_once() -> None:
    payloads = [build_payload(_event(), [], delivery_id=f"d{i}") for i in range(1, 11)]
    text = prompt_text(payloads)
    lines = [json.loads(x) for x in text.splitlines() if x.startswith("{")]
    assert [x["delivery"] for x in lines] == [f"d{i}" for i in range(1, 11)]


def test_a_retry_never_resends_an_event_the_session_already_holds() -> None:
    payloads = [build_payload(_event(), [], delivery_id=f"d{i}") for i in (1, 2)]
    text = prompt_text(payloads, seen=["d1"])
    lines = [json.loads(x) for x in text.splitlines() if x.startswith("{")]
    assert [x["delivery"] for x in lines] == ["d2"]  # d1 is only pointed at
    assert "d1" in text
    # The earlier turn may have acted before it was stopped (a time limit): never "act now".
    assert "act on them now" not in text and "check what that turn already did" in text
    only = nudge_text(["d1", "d2"])
    assert PAYLOAD_MARK not in only and "d1, d2" in only


def test_payload_stays_under_the_cap_whatever_the_event_holds() -> None:
    huge = _event(reason="x" * 50_000, counts={f"k{i}": i for i in range(2000)})
    p = build_payload(huge, [_attempt(i) for i in range(100)], delivery_id="d1")
    assert len(json.dumps(p, separators=(",", ":"))) <= TARGET
    assert p["task_id"] == "t1"
    assert len(prompt_text([p]).encode()) <= HARD_CAP


def test_a_planted_secret_in_the_environment_never_reaches_a_payload(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    canary = "CANARY-SECRET-7f3a"
    monkeypatch.setenv("GLOBUS_COMPUTE_CLIENT_SECRET", canary)
    monkeypatch.setenv("ANTHROPIC_API_KEY", canary)
    p = build_payload(_event(), [_attempt(1)], delivery_id="d1")
    assert canary not in json.dumps(p)
    assert canary not in prompt_text([p])


def test_continuation_specs_name_what_each_runtime_needs() -> None:
    with pytest.raises(ValueError, match="needs command"):
        ContinuationSpec(runtime=Runtime.COMMAND)
    with pytest.raises(ValueError, match="needs session_id"):
        ContinuationSpec(runtime=Runtime.CODEX)
    with pytest.raises(ValueError, match="needs session_id"):
        ContinuationSpec(runtime=Runtime.CLAUDE_CODE, cwd="/work/p")  # never "the last one here"
    with pytest.raises(ValueError, match="needs cwd"):
        ContinuationSpec(runtime=Runtime.CLAUDE_CODE, session_id="s1")
    with pytest.raises(ValueError, match="session_id"):
        ContinuationSpec(runtime=Runtime.CODEX, session_id="x; rm -rf /")
    assert ContinuationSpec(runtime=Runtime.CLAUDE_CODE, session_id="s1", cwd="/work/p").events


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


def test_an_inbox_longer_than_one_prompt_says_how_many_events_it_did_not_show(
    tmp_path: Path,
) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "s1.jsonl").write_text("".join(f'{{"seq":{i}}}\n' for i in range(25)))
    out = user_prompt_submit('{"session_id": "s1"}', tmp_path)
    assert out is not None
    context = json.loads(out)["hookSpecificOutput"]["additionalContext"]
    assert '{"seq":24}' in context and '{"seq":5}' in context and '{"seq":4}' not in context
    assert "5 earlier event(s) not shown: list_events has them all" in context


def test_one_resume_carries_at_most_20_events_and_8_kb_of_prompt_the_rest_wait_in_order() -> None:
    from fedhpc.bridge.payload import BATCH_BYTES, BATCH_EVENTS, batch_size

    small = [build_payload(_event(), [], delivery_id=f"d{i}") for i in range(1000)]
    n = batch_size(small)
    assert n == BATCH_EVENTS
    assert len(prompt_text(small[:n]).encode()) <= BATCH_BYTES
    big = [
        build_payload(_event(reason="x" * 300, hint="y" * 500), [_attempt(1)], delivery_id=f"d{i}")
        for i in range(1000)
    ]
    m = batch_size(big)
    assert 1 <= m < BATCH_EVENTS
    assert len(prompt_text(big[:m]).encode()) <= BATCH_BYTES
    assert len(prompt_text(big[: m + 1]).encode()) > BATCH_BYTES
    # the batches, taken one after another, carry every event once, in order
    rest, sent = small, []
    while rest:
        k = batch_size(rest)
        sent += [p["delivery"] for p in rest[:k]]
        rest = rest[k:]
    assert sent == [f"d{i}" for i in range(1000)]
    assert batch_size(big[:1]) == 1


def test_a_failed_transfer_says_why_as_well_as_how_to_fix_it() -> None:
    event = {
        "kind": "transfer.failed",
        "id": "ev_2",
        "subject": "x1",
        "seq": 2,
        "created_at": datetime(2026, 11, 30, tzinfo=UTC).isoformat(),
        "payload": {
            "transfer_id": "x1",
            "state": "failed",
            "result": "fedhpc://transfers/x1",
            "error": {
                "code": "not_found",
                "message": "no such file: in.dat",
                "hint": "Check the source path.",
            },
        },
    }
    p = build_payload(event, [], delivery_id="d2")
    assert p["reason"] == "no such file: in.dat"
    assert p["hint"] == "Check the source path."


def test_a_late_payload_says_when_its_event_was_and_which_came_after() -> None:
    event = {
        "kind": "task.terminal",
        "subject": "t1",
        "payload": {"task_id": "t1", "state": "failed"},
    }
    payload = build_payload(event, [], delivery_id="d3-c1")
    after = [f"d{n}-c1" for n in range(4, 11)]
    late = late_payload(
        payload,
        event_at="2026-12-01T09:30:00+00:00",
        redriven_at="2026-12-02T08:00:00+00:00",
        after=after,
    )
    assert late["late"]["event_at"] == "2026-12-01T09:30:00+00:00"
    assert late["late"]["after"] == after[:5] and late["late"]["after_more"] == 2
    assert "delivered late" in late["late"]["note"]
    assert {k: v for k, v in late.items() if k != "late"} == payload  # the rest unchanged
    again = late_payload(late, event_at=None, redriven_at="2026-12-03T08:00:00+00:00")
    assert again["late"]["redriven_at"].startswith("2026-12-03") and "after" not in again["late"]
    assert len(json.dumps(late).encode()) < TARGET


def test_a_late_event_the_session_already_holds_is_pointed_at_as_late() -> None:
    payload = {"fedhpc": "continuation", "delivery": "d3-c1", "task_id": "t1"}
    late = late_payload(payload, event_at="2026-12-01T09:30:00+00:00", redriven_at="x")
    text = prompt_text([late], seen=["d3-c1"])
    assert "d3-c1 come late" in text and "check the current state" in text
    assert '"fedhpc":"continuation"' not in text  # still never re-sent
    assert "come late" not in prompt_text([payload], seen=["d3-c1"])
