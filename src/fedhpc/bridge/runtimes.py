"""How a continuation wakes its agent. Process runtimes run detached with their exit status
written to a file, so a restarted daemon learns what happened instead of resuming twice."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedhpc.bridge.payload import prompt_text
from fedhpc.errors import PermanentError, TransientError, UsageError
from fedhpc.ops.continuations import ContinuationSpec, Runtime

__all__ = ["Launched", "collect", "launch", "mcp_config", "process_alive"]


@dataclass(frozen=True, slots=True)
class Launched:
    """A started process runtime: where its status and output land."""

    pid: int
    folder: Path


def _binary(env: str, name: str) -> str:
    found = os.environ.get(env) or shutil.which(name)
    if not found:
        raise UsageError(f"{name} not found", hint=f"Install it or set {env}.")
    return found


def mcp_config(home: Path) -> Path:
    """The MCP config a resumed Claude session needs to see its fedhpc tools again."""
    path = home / "mcp.json"
    fedhpc = shutil.which("fedhpc") or "fedhpc"
    body = {"mcpServers": {"fedhpc": {"type": "stdio", "command": fedhpc, "args": ["serve"],
                                      "env": {"FEDHPC_HOME": str(home)}}}}  # fmt: skip
    path.write_text(json.dumps(body, indent=2))
    path.chmod(0o600)
    return path


def _argv(spec: ContinuationSpec, session: str | None, text: str, home: Path) -> list[str]:
    if spec.runtime is Runtime.COMMAND:
        return list(spec.command)
    if spec.runtime is Runtime.CLAUDE_CODE:
        if session is None:
            raise TransientError(
                "no Claude session known for this cwd yet",
                hint="Install the SessionStart hook (docs/continuation.md).",
            )
        return [
            _binary("FEDHPC_CLAUDE_BIN", "claude"), "-p", "--resume", session, text,
            "--output-format", "json", "--mcp-config", str(mcp_config(home)),
            "--allowedTools", "mcp__fedhpc",
        ]  # fmt: skip
    if spec.runtime is Runtime.CODEX:
        assert session is not None
        return [_binary("FEDHPC_CODEX_BIN", "codex"), "exec", "resume", session, text, "--json",
                "--skip-git-repo-check"]  # fmt: skip
    raise ValueError(f"{spec.runtime} is not a process runtime")


def launch(
    spec: ContinuationSpec,
    session: str | None,
    payload: dict[str, Any],
    folder: Path,
    *,
    home: Path,
    timeout_s: float,
) -> Launched:
    """Start the runtime detached: payload on stdin (command) or as the prompt (claude, codex);
    `rc` appears in `folder` when it ends, killed after `timeout_s` (codex waits forever for
    a model it cannot reach)."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    text = prompt_text(payload)
    (folder / "payload.json").write_text(json.dumps(payload, separators=(",", ":")))
    argv = _argv(spec, session, text, home)
    wrapper = (
        'timeout --kill-after=5 "$1" "${@:3}" < "$2/payload.json" > "$2/out" 2> "$2/err"; '
        'echo $? > "$2/rc.tmp" && mv "$2/rc.tmp" "$2/rc"'
    )
    cwd = spec.cwd if spec.cwd and Path(spec.cwd).is_dir() else str(folder)
    proc = subprocess.Popen(
        ["bash", "-c", wrapper, "fedhpc-resume", str(int(timeout_s)), str(folder), *argv],
        cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,  # survives a daemon crash; its rc file tells the next daemon
    )  # fmt: skip
    (folder / "pid").write_text(str(proc.pid))
    return Launched(proc.pid, folder)


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split()[2] == "Z")


def collect(folder: Path) -> tuple[int, str] | None:
    """(exit status, stderr tail) once the process ended, else None."""
    rc = folder / "rc"
    if not rc.exists():
        return None
    err = (folder / "err").read_text(errors="replace")[-500:] if (folder / "err").exists() else ""
    return int(rc.read_text().strip() or "1"), err


def check_result(spec: ContinuationSpec, folder: Path, status: int, err: str) -> None:
    """Raise when a resume did not really happen (Claude may exit 1 with is_error JSON)."""
    if status == 124:
        raise TransientError(f"{spec.runtime.value} timed out")
    if status != 0:
        raise TransientError(f"{spec.runtime.value} exited {status}: {err.strip()[-200:]}")
    if spec.runtime is Runtime.CLAUDE_CODE:
        try:
            answer = json.loads((folder / "out").read_text() or "{}")
        except json.JSONDecodeError:
            return
        if answer.get("is_error"):
            raise PermanentError(f"claude: {str(answer.get('result'))[:200]}")
