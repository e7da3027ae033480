"""Whether a resumed turn's fedhpc calls reached the daemon, read from what the CLI printed.

A resumed turn can run to its end while the daemon is down (killed, or restarting for longer
than the resume's MCP server waits): its `get_result` answers `daemon_unavailable`, the model
ends the turn, and the CLI exits 0. Counting that delivery delivered would consume the event
although the agent never saw what it points at. A turn whose last fedhpc call got such an
answer did not reach fedhpc; the bridge delivers its events again, once."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from fedhpc.bridge.outcome import out_lines
from fedhpc.ops.continuations import ContinuationSpec, Runtime

__all__ = ["UNREACHED", "Call", "fedhpc_calls", "unreached"]

# The codes of fedhpc's typed errors (client/errors.py) for "the daemon did not answer".
UNREACHED = frozenset({"daemon_unavailable", "daemon_timeout"})
_CLAUDE_PREFIX = "mcp__fedhpc__"
_CODE = re.compile(r'"code"\s*:\s*"([a-z_]+)"')


@dataclass(frozen=True, slots=True)
class Call:
    """One fedhpc tool call of the turn: the tool, and its error's code (None: it answered)."""

    tool: str
    error: str | None


def _strings(value: object) -> Iterator[str]:
    """Every string inside a JSON value (a tool result's text may be nested in blocks)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _code(value: object) -> str:
    """The first fedhpc error code in a tool's answer ("" when none)."""
    for text in _strings(value):
        if found := _CODE.search(text):
            return found.group(1)
    return ""


def _claude(lines: list[dict[str, object]]) -> list[Call]:
    names: dict[str, str] = {}  # tool_use id -> fedhpc tool
    calls: list[Call] = []
    for x in lines:
        message = x.get("message")
        blocks = message.get("content") if isinstance(message, dict) else None
        for b in blocks if isinstance(blocks, list) else []:
            if not isinstance(b, dict):
                continue
            if b.get("type") == "tool_use" and str(b.get("name", "")).startswith(_CLAUDE_PREFIX):
                names[str(b.get("id"))] = str(b["name"]).removeprefix(_CLAUDE_PREFIX)
            elif b.get("type") == "tool_result" and str(b.get("tool_use_id")) in names:
                failed = b.get("is_error") is True
                code = _code(b.get("content")) if failed else ""
                calls.append(Call(names[str(b.get("tool_use_id"))], code or None))
    return calls


def _codex(lines: list[dict[str, object]]) -> list[Call]:
    calls: list[Call] = []
    for x in lines:
        item = x.get("item")
        if x.get("type") != "item.completed" or not isinstance(item, dict):
            continue
        if item.get("type") != "mcp_tool_call" or item.get("server") != "fedhpc":
            continue
        failed = item.get("status") == "failed" or item.get("error") is not None
        result = item.get("result")
        is_error = isinstance(result, dict) and result.get("is_error") is True
        code = _code([result, item.get("error")])
        # Codex may mark an is_error result either way: an unreached code counts regardless
        if not (failed or is_error or code in UNREACHED):
            code = ""
        calls.append(Call(str(item.get("tool", "?")), code or ("failed" if failed else None)))
    return calls


def fedhpc_calls(spec: ContinuationSpec, folder: Path) -> list[Call]:
    """The fedhpc tool calls the resumed turn in `folder` finished, in order."""
    lines = out_lines(folder)
    if spec.runtime is Runtime.CLAUDE_CODE:
        return _claude(lines)
    if spec.runtime is Runtime.CODEX:
        return _codex(lines)
    return []


def unreached(spec: ContinuationSpec, folder: Path) -> str:
    """Why the resumed turn did not reach fedhpc ("" when it did, or made no fedhpc call): its
    last fedhpc call was answered with a code of `UNREACHED`. A later call that was answered
    means the daemon came back within the turn, and the agent read what it needed."""
    calls = fedhpc_calls(spec, folder)
    if not calls or calls[-1].error not in UNREACHED:
        return ""
    failed = [c for c in calls if c.error in UNREACHED]
    said = ", ".join(sorted({f"{c.tool}: {c.error}" for c in failed}))
    return (
        f"the resumed turn ran, but its fedhpc calls could not reach the daemon ({said}: "
        "it was down or restarting)"
    )
