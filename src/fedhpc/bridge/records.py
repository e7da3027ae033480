"""The session's own record, read before a retry: which deliveries it already holds.

A killed or timed-out resume has usually written its prompt into the session already; sending
it again would show the model the same event twice. Each event line carries its delivery id,
so the bridge looks for the ids in Claude's transcript
(`~/.claude/projects/<cwd with non-alphanumerics as ->/<session>.jsonl`, or the path the
PreToolUse hook reported) or Codex's rollout (`$CODEX_HOME/sessions/**/rollout-*<thread>.jsonl`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from fedhpc.ops.continuations import ContinuationSpec, Runtime
from fedhpc.settings.others import CLAUDE_CONFIG_DIR, CODEX_HOME

__all__ = ["record_path", "seen"]


def _claude_home(env: dict[str, str]) -> Path:
    if configured := CLAUDE_CONFIG_DIR.read(env):
        return Path(configured)
    return Path(env.get("HOME", str(Path.home()))) / ".claude"


def record_path(spec: ContinuationSpec, env: dict[str, str]) -> Path | None:
    """Where the session's record is, if it can be found."""
    if spec.session_id is None:
        return None
    if spec.runtime is Runtime.CLAUDE_CODE:
        if spec.transcript and Path(spec.transcript).exists():
            return Path(spec.transcript)
        if spec.cwd:
            mangled = re.sub(r"[^A-Za-z0-9]", "-", spec.cwd)
            path = _claude_home(env) / "projects" / mangled / f"{spec.session_id}.jsonl"
            return path if path.exists() else None
        return None
    if spec.runtime is Runtime.CODEX:
        base = Path(CODEX_HOME.read(env) or Path(env.get("HOME", str(Path.home()))) / ".codex")
        found = sorted((base / "sessions").glob(f"**/rollout-*{spec.session_id}.jsonl"))
        return found[-1] if found else None
    return None


def seen(spec: ContinuationSpec, env: dict[str, str], deliveries: Sequence[str]) -> list[str]:
    """The delivery ids (of `deliveries`) the session's record already holds."""
    path = record_path(spec, env)
    if path is None or not deliveries:
        return []
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    return [
        d for d in deliveries if f'\\"delivery\\":\\"{d}\\"' in text or f'"delivery":"{d}"' in text
    ]
