"""`fedhpc hook post-tool-use` records which Claude session made which work on a service
(`relay_bindings`), and the relay binds that work's events to that session; work no session
was recorded for goes to the relay's `--continuation`, or wakes nobody (said in its log)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from fedhpc.client.relay import mirror
from fedhpc.client.relay_bindings import bind_from_hook, bound_spec
from fedhpc.ops.continuations import ContinuationSpec, Runtime
from fedhpc.store import Store

FALLBACK = ContinuationSpec.model_validate({"runtime": "inbox", "inbox": "me"})


def _hook(tool: str, response: Any, session: str = "s-1") -> str:
    return json.dumps(
        {
            "session_id": session,
            "transcript_path": f"/home/p/.claude/{session}.jsonl",
            "cwd": "/home/p/project",
            "hook_event_name": "PostToolUse",
            "tool_name": tool,
            "tool_input": {},
            "tool_use_id": "toolu_01",
            "tool_response": response,
        }
    )


def _event(seq: int, subject: str, **payload: object) -> dict[str, object]:
    return {
        "seq": seq,
        "id": f"e{seq}",
        "kind": "task.terminal",
        "subject": subject,
        "created_at": "2026-12-05T12:00:00+00:00",
        "payload": {"task_id": subject, "state": "completed", **payload},
    }


def test_a_submits_answer_binds_its_task_or_group_and_children(tmp_path: Path) -> None:
    folder = tmp_path / "bindings"
    text = json.dumps({"task_id": "t01c9d9ee2ca", "state": "submitted"})
    assert bind_from_hook(_hook("mcp__fedhpc__submit_task", text), folder) == ["t01c9d9ee2ca"]
    group = {"group_id": "g0a1b2c3d4e5", "children": [{"task_id": "t111aaa222bb"}]}
    blocks = [{"type": "text", "text": json.dumps(group)}]  # an MCP result's content blocks
    got = bind_from_hook(_hook("mcp__fedhpc__submit_group", blocks, "s-2"), folder)
    assert got == ["g0a1b2c3d4e5", "t111aaa222bb"]
    spec = bound_spec(folder, ["t111aaa222bb"])
    assert spec is not None and spec.runtime is Runtime.CLAUDE_CODE
    assert (spec.session_id, spec.cwd) == ("s-2", "/home/p/project")
    assert bind_from_hook(_hook("mcp__other__submit_task", text), folder) == []
    assert bound_spec(folder, ["../etc/passwd", "tnothere000"]) is None  # never a path


async def test_the_relay_binds_each_event_to_its_recorded_session(
    store: Store, tmp_path: Path
) -> None:
    folder = tmp_path / "bindings"
    bind_from_hook(_hook("mcp__fedhpc__submit_task", json.dumps({"task_id": "taaaa1111"})), folder)
    page = [_event(1, "taaaa1111"), _event(2, "tbbbb2222")]
    assert await mirror(store, page, FALLBACK, folder) == 2
    rows = {c["subject"]: c for c in await store.continuations_for(["taaaa1111", "tbbbb2222"])}
    assert rows["taaaa1111"]["runtime"] == "claude-code"  # the session that submitted it
    assert rows["tbbbb2222"]["runtime"] == "inbox"  # nobody recorded: the relay's fallback
    assert await mirror(store, [_event(3, "tcccc3333")], None, folder) == 1
    assert await store.continuations_for(["tcccc3333"]) == []  # kept, but wakes nobody


def test_the_hook_command_writes_where_the_relay_reads(tmp_path: Path) -> None:
    stdin = _hook("mcp__fedhpc__submit_task", json.dumps({"task_id": "t0123456789a"}))
    env = {**os.environ, "FEDHPC_HOME": str(tmp_path)}
    argv = [sys.executable, "-m", "fedhpc.cli.main", "hook", "post-tool-use"]
    out = subprocess.run(argv, input=stdin, env=env, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "relay" / "bindings" / "t0123456789a.json").exists()
    bad = subprocess.run(argv, input="{", env=env, capture_output=True, text=True, check=False)
    assert bad.returncode == 0 and "post-tool-use" in bad.stderr  # never blocks the agent
