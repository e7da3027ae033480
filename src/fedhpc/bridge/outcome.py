"""What a resume process left in its folder: how it ended, the tails of what it printed, and
whether the resumed turn really happened (the launch: `bridge/runtimes.py`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from fedhpc.errors import TransientError
from fedhpc.ops.continuations import ContinuationSpec, Runtime

__all__ = [
    "Outcome",
    "check_result",
    "codex_errors",
    "collect",
    "model_answered",
    "out_lines",
    "tail_of",
    "why_silent",
]

TAIL = 600  # bytes of stdout and of stderr kept as a failure's reason
# `codex exec --json` items that only the model's output makes (codex-rs exec_events); an
# `error` item is Codex's own notice, printed before any request (e.g. "Model metadata for
# `<name>` not found" for every model name it does not know): never a sign of a live model.
_CODEX_MODEL_ITEMS = frozenset(
    {
        "agent_message",
        "reasoning",
        "command_execution",
        "file_change",
        "mcp_tool_call",
        "collab_tool_call",
        "web_search",
        "todo_list",
    }
)


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a resume process ended: its status, and the tails of what it printed."""

    status: int
    out: str
    err: str

    def reason(self) -> str:
        parts = [f"exit {self.status}"]
        if self.out.strip():
            parts.append(f"stdout: {self.out.strip()[-TAIL:]}")
        if self.err.strip():
            parts.append(f"stderr: {self.err.strip()[-TAIL:]}")
        return "; ".join(parts)


def tail_of(path: Path) -> str:
    if not path.exists():
        return ""
    with path.open("rb") as fh:
        fh.seek(max(0, path.stat().st_size - 4 * TAIL))
        return fh.read().decode(errors="replace")[-TAIL:]


def collect(folder: Path) -> Outcome | None:
    """How the process ended, once it did, else None."""
    rc = folder / "rc"
    if not rc.exists():
        return None
    text = rc.read_text().strip()
    status = int(text) if text.lstrip("-").isdigit() else 1
    return Outcome(status, tail_of(folder / "out"), tail_of(folder / "err"))


def out_lines(folder: Path) -> list[dict[str, object]]:
    """The JSON objects a resume's CLI printed on stdout, one a line, in order."""
    out: list[dict[str, object]] = []
    path = folder / "out"
    if not path.exists():
        return out
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                out.append(obj)
    return out


def model_answered(spec: ContinuationSpec, folder: Path) -> bool:
    """Whether the resumed turn got any answer from the model yet (a turn still waiting for
    its first answer after the start timeout is stuck on an unreachable model). Codex: only
    items the model's output makes count, never its own `error` notices."""
    path = folder / "out"
    if spec.runtime not in (Runtime.CLAUDE_CODE, Runtime.CODEX) or not path.exists():
        return True
    if spec.runtime is Runtime.CLAUDE_CODE:
        return '"type":"assistant"' in path.read_text(errors="replace")
    for x in out_lines(folder):
        item = x.get("item")
        if x.get("type") == "turn.completed" or (
            str(x.get("type", "")).startswith("item.")
            and isinstance(item, dict)
            and item.get("type") in _CODEX_MODEL_ITEMS
        ):
            return True
    return False


def codex_errors(folder: Path) -> list[str]:
    """The messages of Codex's `error` items and events in a resume's output, in order."""
    said: list[str] = []
    for x in out_lines(folder):
        item = x.get("item")
        if isinstance(item, dict) and item.get("type") == "error":
            said.append(str(item.get("message", "")))
        elif x.get("type") == "error":
            said.append(str(x.get("message", "")))
    return [m[:200] for m in said if m]


def why_silent(folder: Path) -> str:
    """What the CLI said while no model answered (Codex's error notices), for a stopped
    resume's reason: "" when it said nothing."""
    said = codex_errors(folder)
    return f" (codex said: {'; '.join(said[-3:])})" if said else ""


def check_result(spec: ContinuationSpec, folder: Path, done: Outcome) -> bool | None:
    """Raise when a resume did not really happen; else whether the resumed turn had fedhpc's
    tools (claude-code: from the CLI's init line; None where the runtime does not say)."""
    if done.status in (124, 137, 143):
        raise TransientError(f"{spec.runtime.value} timed out or was stopped; {done.reason()}")
    if spec.runtime is Runtime.CLAUDE_CODE:
        lines = out_lines(folder)
        result = next((x for x in reversed(lines) if x.get("type") == "result"), None)
        if done.status != 0 or result is None or result.get("is_error"):
            said = str(result.get("result"))[:300] if result else ""
            raise TransientError(
                f"claude-code did not complete the turn{': ' + said if said else ''}; "
                f"{done.reason()}"
            )
        init = next((x for x in lines if x.get("subtype") == "init"), {})
        servers = init.get("mcp_servers")
        tools = init.get("tools")
        status = next(
            (
                s.get("status")
                for s in (servers if isinstance(servers, list) else [])
                if isinstance(s, dict) and s.get("name") == "fedhpc"
            ),
            None,
        )
        has = status == "connected" and any(
            str(t).startswith("mcp__fedhpc__") for t in (tools if isinstance(tools, list) else [])
        )
        if not has:
            raise TransientError(
                f"the resumed Claude turn ran without fedhpc's tools (server {status or 'absent'})"
            )
        return True
    if done.status != 0:
        raise TransientError(f"{spec.runtime.value} failed; {done.reason()}")
    if spec.runtime is Runtime.CODEX:
        lines = out_lines(folder)
        if any(x.get("type") == "turn.failed" for x in lines) or not any(
            x.get("type") == "turn.completed" for x in lines
        ):
            raise TransientError(f"codex did not complete the turn; {done.reason()}")
    return None
