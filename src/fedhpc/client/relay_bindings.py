"""Which local Claude Code session made which work on a fedhpc service, for `fedhpc relay`:
Claude's PostToolUse hook (`fedhpc hook post-tool-use`) sees the session and the submit's
answer (its task, group or transfer id) and records the pair in the relay's folder; the relay
binds each event of that work to that session. Work no session was recorded for wakes the
relay's `--continuation`, if it has one."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from fedhpc.ops.continuations import ContinuationSpec, Runtime, ToolBinding

__all__ = ["BINDINGS", "bind_from_hook", "bound_spec"]

BINDINGS = "bindings"  # the folder of the relay's home holding one file per bound id
_ID = re.compile(r"^[tgx][0-9a-z]{4,40}$")  # a task, group or transfer id (their own forms)
_KEYS = ("task_id", "group_id", "transfer_id")


def _answer(response: Any) -> dict[str, Any]:
    """The tool's answer from the hook's `tool_response`: its JSON text, alone or in content
    blocks (as Claude passes an MCP tool's result), or the object itself."""
    if isinstance(response, dict) and any(k in response for k in _KEYS):
        return response
    if isinstance(response, dict):
        response = response.get("content", response.get("text", ""))
    if isinstance(response, list):
        response = "".join(str(b.get("text", "")) for b in response if isinstance(b, dict))
    if not isinstance(response, str):
        return {}
    try:
        got = json.loads(response)
    except ValueError:
        return {}
    return got if isinstance(got, dict) else {}


def bind_from_hook(stdin: str, folder: Path) -> list[str]:
    """From a PostToolUse hook's input: the ids a fedhpc submit of this session returned, each
    recorded in `folder` with the session's continuation; the ids recorded."""
    data = json.loads(stdin or "{}")
    if not isinstance(data, dict):
        return []
    name = str(data.get("tool_name") or "")
    if not name.startswith("mcp__fedhpc__"):
        return []
    binding = ToolBinding.model_validate(data)
    spec = ContinuationSpec(
        runtime=Runtime.CLAUDE_CODE,
        session_id=binding.session_id,
        cwd=binding.cwd,
        transcript=binding.transcript_path,
    )
    answer = _answer(data.get("tool_response"))
    ids = [str(answer[k]) for k in _KEYS if _ID.match(str(answer.get(k) or ""))]
    ids += [
        str(c["task_id"])
        for c in answer.get("children") or []
        if isinstance(c, dict) and _ID.match(str(c.get("task_id") or ""))
    ]
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    body = spec.model_dump_json()
    for i in ids:
        tmp = folder / f".{i}.tmp"
        tmp.write_text(body)
        os.replace(tmp, folder / f"{i}.json")
    return ids


def bound_spec(folder: Path, ids: list[str]) -> ContinuationSpec | None:
    """The session recorded for the first of `ids` that has one, else None."""
    for i in ids:
        if not _ID.match(i):
            continue
        try:
            return ContinuationSpec.model_validate_json((folder / f"{i}.json").read_text())
        except (OSError, ValueError):
            continue
    return None
