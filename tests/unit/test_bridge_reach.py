"""Whether a resumed turn's fedhpc calls reached the daemon, read from the CLI's output lines
(shapes of Claude Code's stream-json and `codex exec --json`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fedhpc.bridge.payload import prompt_text
from fedhpc.bridge.reach import Call, fedhpc_calls, unreached
from fedhpc.ops.continuations import ContinuationSpec, Runtime

CLAUDE = ContinuationSpec(runtime=Runtime.CLAUDE_CODE, session_id="s1", cwd="/tmp")
CODEX = ContinuationSpec(runtime=Runtime.CODEX, session_id="t1")
DOWN = json.dumps({"code": "daemon_unavailable", "message": "no daemon", "hint": "start it"})
OK = json.dumps({"task_id": "t-1", "state": "completed"})


def _out(tmp_path: Path, lines: list[dict[str, Any]]) -> Path:
    (tmp_path / "out").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return tmp_path


def _claude_call(n: int, tool: str, text: str, *, error: bool) -> list[dict[str, Any]]:
    use = {"type": "tool_use", "id": f"toolu_{n}", "name": tool, "input": {}}
    result = {
        "type": "tool_result",
        "tool_use_id": f"toolu_{n}",
        "content": [{"type": "text", "text": text}],
        "is_error": error,
    }
    return [
        {"type": "assistant", "message": {"role": "assistant", "content": [use]}},
        {"type": "user", "message": {"role": "user", "content": [result]}},
    ]


def _codex_call(tool: str, text: str, *, status: str, server: str = "fedhpc") -> dict[str, Any]:
    item = {
        "id": "item_1",
        "type": "mcp_tool_call",
        "server": server,
        "tool": tool,
        "arguments": {},
        "result": {"content": [{"type": "text", "text": text}], "structured_content": None},
        "error": None,
        "status": status,
    }
    return {"type": "item.completed", "item": item}


def test_a_claude_turn_whose_get_result_found_no_daemon_did_not_reach_fedhpc(
    tmp_path: Path,
) -> None:
    folder = _out(tmp_path, _claude_call(1, "mcp__fedhpc__get_result", DOWN, error=True))
    assert fedhpc_calls(CLAUDE, folder) == [Call("get_result", "daemon_unavailable")]
    why = unreached(CLAUDE, folder)
    assert "could not reach the daemon" in why and "get_result: daemon_unavailable" in why


def test_a_claude_turn_whose_later_call_was_answered_reached_fedhpc(tmp_path: Path) -> None:
    lines = _claude_call(1, "mcp__fedhpc__get_result", DOWN, error=True)
    lines += _claude_call(2, "mcp__fedhpc__get_result", OK, error=False)
    assert unreached(CLAUDE, _out(tmp_path, lines)) == ""


def test_other_tools_and_other_errors_are_not_a_missing_daemon(tmp_path: Path) -> None:
    refused = json.dumps({"code": "validation_failed", "message": "bad", "hint": "fix"})
    lines = _claude_call(1, "mcp__other__get_result", DOWN, error=True)  # not fedhpc's
    lines += _claude_call(2, "mcp__fedhpc__submit_task", refused, error=True)
    folder = _out(tmp_path, lines)
    assert fedhpc_calls(CLAUDE, folder) == [Call("submit_task", "validation_failed")]
    assert unreached(CLAUDE, folder) == ""


def test_a_turn_without_fedhpc_calls_reached_fedhpc(tmp_path: Path) -> None:
    text = {"type": "assistant", "message": {"content": [{"type": "text", "text": DOWN}]}}
    assert unreached(CLAUDE, _out(tmp_path, [text])) == ""
    assert unreached(CODEX, _out(tmp_path, [])) == ""


def test_a_codex_turn_whose_fedhpc_call_failed_on_the_daemon_did_not_reach_fedhpc(
    tmp_path: Path,
) -> None:
    folder = _out(tmp_path, [_codex_call("get_result", DOWN, status="failed")])
    assert fedhpc_calls(CODEX, folder) == [Call("get_result", "daemon_unavailable")]
    assert "get_result: daemon_unavailable" in unreached(CODEX, folder)
    # marked completed all the same: the code still tells
    folder = _out(tmp_path, [_codex_call("get_result", DOWN, status="completed")])
    assert unreached(CODEX, folder) != ""


def test_a_codex_turn_that_read_its_result_or_used_another_server_reached_fedhpc(
    tmp_path: Path,
) -> None:
    lines = [
        _codex_call("get_result", DOWN, status="failed", server="other"),
        _codex_call("get_result", OK, status="completed"),
    ]
    folder = _out(tmp_path, lines)
    assert fedhpc_calls(CODEX, folder) == [Call("get_result", None)]
    assert unreached(CODEX, folder) == ""


def test_the_re_delivery_points_at_the_event_and_says_the_daemon_was_not_reached() -> None:
    payload = {"fedhpc": "continuation", "delivery": "d7-c1", "task_id": "t-1"}
    text = prompt_text([payload], seen=["d7-c1"], unreached=["d7-c1"])
    assert "d7-c1" in text and "could not reach the fedhpc daemon" in text
    assert '"fedhpc":"continuation"' not in text  # never re-sent: the session holds it
    stopped = prompt_text([payload], seen=["d7-c1"])
    assert "did not finish" in stopped and "could not reach" not in stopped
