"""How a continuation wakes its agent. Process runtimes run detached with their exit status
written to a file, so a restarted daemon learns what happened instead of resuming twice.

A resume gets the environment the `[resume]` section of the user config gives its runtime,
never the daemon's own: the daemon may have been started by any client."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedhpc.domain.config import ResumeRuntime
from fedhpc.errors import TransientError, UsageError
from fedhpc.ops.continuations import ContinuationSpec, Runtime
from fedhpc.settings import CLAUDE_BIN, CODEX_BIN, HOME

__all__ = [
    "DEFAULT_PATH",
    "Launched",
    "binary",
    "fedhpc_bin",
    "launch",
    "mcp_config",
    "resume_env",
]

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
_BASE_VARS = ("HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ")
_NAMES = {Runtime.CLAUDE_CODE: ("claude", CLAUDE_BIN), Runtime.CODEX: ("codex", CODEX_BIN)}


@dataclass(frozen=True, slots=True)
class Launched:
    """A started process runtime: where its status and output land."""

    pid: int
    folder: Path


def _env_file(path: str) -> dict[str, str]:
    found: dict[str, str] = {}
    file = Path(path).expanduser()
    try:
        lines = file.read_text().splitlines()
    except OSError as exc:
        raise UsageError(
            f"resume env_file {file}: {exc.strerror}", hint="Fix [resume] in the config."
        ) from exc
    for n, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.removeprefix("export ").partition("=")
        if not sep:  # never quote the line: it may be a secret (it reaches last_error, logs)
            raise UsageError(
                f"resume env_file {file}: line {n} is not KEY=VALUE",
                hint="Fix that line of the file (its text is not shown).",
            )
        found[key.strip()] = value.strip().strip('"').strip("'")
    return found


def fedhpc_bin(home: Path, folder: Path | None = None) -> Path:
    """A folder holding only `fedhpc`: this very install (the daemon's own interpreter), first
    on every resume's PATH, so what the resumed CLI starts by name (Claude's `fedhpc hook ...`,
    Codex's registered `fedhpc serve`) runs whatever `[resume] path` says, and nothing else on
    that PATH changes (a venv's folder would also put its `python` first). `<home>/bin` unless
    `folder` is given (`fedhpc deliveries check`: never what a running daemon uses)."""
    folder = folder or home / "bin"
    exe = folder / "fedhpc"
    # The relay: a stdio `fedhpc serve` goes to the bridge's preloaded host (ServeHost),
    # anything else runs as `fedhpc.cli.main`.
    text = f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m fedhpc.cli.relay "$@"\n'
    try:
        same = exe.read_text() == text
    except OSError:
        same = False
    if not same:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = folder / ".fedhpc.tmp"
        tmp.write_text(text)
        tmp.chmod(0o755)
        tmp.replace(exe)
    return folder


def resume_env(
    cfg: ResumeRuntime, home: Path, *, inherit: bool = False, bin_dir: Path | None = None
) -> dict[str, str]:
    """The whole environment of a resume: identity (HOME, USER, LANG), PATH (`fedhpc_bin`
    first: `bin_dir`, default `<home>/bin`), FEDHPC_HOME, then the config's env_file and
    env. Credentials come only from the config. `inherit` (the `command` runtime: a program
    the daemon's own starter named, such as `fedhpc demo`'s scripted agent) starts from the
    daemon's environment instead."""
    env = dict(os.environ) if inherit else {k: os.environ[k] for k in _BASE_VARS if k in os.environ}
    env["PATH"] = cfg.path or (os.environ.get("PATH", DEFAULT_PATH) if inherit else DEFAULT_PATH)
    env[HOME.name] = str(home)
    if cfg.env_file:
        env.update(_env_file(cfg.env_file))
    env.update(cfg.env)  # a PATH set here too still comes after fedhpc's folder
    env["PATH"] = f"{bin_dir or home / 'bin'}:{env['PATH']}"
    return env


def binary(runtime: Runtime, cfg: ResumeRuntime, env: dict[str, str]) -> str:
    """The CLI to run: the config's `binary`, else FEDHPC_CLAUDE_BIN/FEDHPC_CODEX_BIN, else the
    name on the resume's PATH."""
    name, var = _NAMES[runtime]
    found = cfg.binary or var.read() or shutil.which(name, path=env.get("PATH"))
    if not found or not os.access(found, os.X_OK):
        raise UsageError(
            f"{name} not found for resumes" + (f" at {found}" if found else ""),
            hint=f"Set binary under [resume.{runtime.value}] in the fedhpc config "
            "(docs/continuation.md), then `fedhpc deliveries check`.",
        )
    return found


def mcp_config(
    home: Path, entry: dict[str, Any] | None = None, *, path: Path | None = None
) -> Path:
    """The MCP config a resumed Claude session needs to see its fedhpc tools again.
    `alwaysLoad` makes Claude Code wait for the server before the turn's first model request,
    up to MCP_CONNECT_TIMEOUT_MS (without it, `-p` loads servers asynchronously and a turn can
    start without the tools), and never defers its tools behind tool search. Written to
    `path` when given (`fedhpc deliveries check`: never the shared file a launch reads)."""
    path = path or home / "mcp.json"
    local = Path(sys.executable).parent / "fedhpc"
    fedhpc = str(local) if local.exists() else (shutil.which("fedhpc") or "fedhpc")
    server = entry or {
        "type": "stdio",
        "command": fedhpc,
        "args": ["serve"],
        "env": {HOME.name: str(home)},
        "alwaysLoad": True,
    }
    body = {"mcpServers": {"fedhpc": server}}
    text = json.dumps(body, indent=2)
    if not path.exists() or path.read_text() != text:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.chmod(0o600)
        tmp.replace(path)
    return path


def _argv(
    spec: ContinuationSpec,
    session: str | None,
    text: str,
    home: Path,
    exe: str,
    *,
    entry: dict[str, Any] | None,
) -> list[str]:
    if spec.runtime is Runtime.COMMAND:
        return list(spec.command)
    assert session is not None
    if spec.runtime is Runtime.CLAUDE_CODE:
        return [
            exe,
            "-p",
            "--resume",
            session,
            text,
            "--output-format",
            "stream-json",
            "--verbose",
            "--mcp-config",
            str(mcp_config(home, entry)),
            "--allowedTools",
            "mcp__fedhpc",
        ]
    if spec.runtime is Runtime.CODEX:
        return [exe, "exec", "resume", session, text, "--json", "--skip-git-repo-check"]
    raise ValueError(f"{spec.runtime} is not a process runtime")


def launch(
    spec: ContinuationSpec,
    text: str,
    folder: Path,
    *,
    home: Path,
    cfg: ResumeRuntime,
    timeout_s: float,
    stdin_text: str | None = None,
    mcp_entry: dict[str, Any] | None = None,
) -> Launched:
    """Start the runtime detached in the session's cwd. Claude and Codex get `text` as their
    prompt argument and /dev/null as stdin (`claude -p` appends stdin to the prompt); a command
    gets `stdin_text` on stdin. `rc` appears in `folder` when it ends; it is killed after
    `timeout_s`."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    (folder / "prompt.txt").write_text(text)
    # claude -p appends stdin to its prompt: only a command gets anything there
    piped = stdin_text if spec.runtime is Runtime.COMMAND else None
    (folder / "stdin").write_text(piped or "")
    env = resume_env(cfg, home, inherit=spec.runtime is Runtime.COMMAND)
    fedhpc_bin(home)  # what the resume's PATH starts with: the daemon's own fedhpc
    if spec.runtime is Runtime.CLAUDE_CODE:
        # An `alwaysLoad` server is waited for only MCP_CONNECT_TIMEOUT_MS (default 5 s), then
        # the turn starts without it: a loaded machine starts `fedhpc serve` slower than that.
        env.setdefault("MCP_CONNECT_TIMEOUT_MS", "60000")
    exe = binary(spec.runtime, cfg, env) if spec.runtime in _NAMES else ""
    argv = _argv(spec, spec.session_id, text, home, exe, entry=mcp_entry)
    # --foreground: GNU timeout otherwise moves itself and the CLI into a group of their own,
    # out of reach of the kill of the wrapper's group (settle.py ends that group as a whole).
    wrapper = (
        'timeout --foreground --kill-after=5 "$1" "${@:3}" < "$2/stdin" > "$2/out" 2> "$2/err"; '
        'echo $? > "$2/rc.tmp" && mv "$2/rc.tmp" "$2/rc"'
    )
    cwd = spec.cwd if spec.cwd and Path(spec.cwd).is_dir() else str(folder)
    # Detached twice: the wrapper leads its own session (it survives a daemon crash, and
    # `kill` ends its whole group) and is nobody's child here (no zombie to reap).
    # The launching shell records the pid itself, first thing: a daemon that dies meanwhile
    # still finds it (a folder without a pid is never taken for "not launched").
    outer = (
        'setsid bash -c "$1" fedhpc-resume "${@:2}" < /dev/null > /dev/null 2>&1 & '
        'echo $! > "$3/pid.tmp" && mv "$3/pid.tmp" "$3/pid"; echo $!'
    )
    done = subprocess.run(
        ["bash", "-c", outer, "fedhpc-launch", wrapper, str(int(timeout_s)), str(folder), *argv],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    pid = int(done.stdout.strip() or "0")
    if done.returncode != 0 or pid <= 0:
        raise TransientError(f"could not start the resume: {done.stderr.strip()[-300:]}")
    return Launched(pid, folder)
