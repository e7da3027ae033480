"""`fedhpc deliveries check`: start each resume runtime the way the daemon would (its binary,
the `[resume]` environment, no model request), and the very commands the resumed CLI would
start under that environment (Codex's registered MCP server, asked for its tools; Claude's
fedhpc hooks), and say what is missing, with the fix. For Codex also its model: a name it
does not know (a note) and an endpoint that does not answer (`codex_model`)."""

from __future__ import annotations

import json
import os
import re
import select
import shlex
import shutil
import subprocess
import tempfile
import time
import tomllib
from pathlib import Path
from typing import IO, Any

from fedhpc.bridge.codex_model import check_model
from fedhpc.bridge.runtimes import binary, fedhpc_bin, mcp_config, resume_env
from fedhpc.domain.config import ResumeRuntime
from fedhpc.errors import FedError
from fedhpc.ops.continuations import Runtime
from fedhpc.profiles.loader import load_user_config, user_config_path
from fedhpc.settings.others import CLAUDE_CONFIG_DIR, CODEX_HOME

__all__ = ["check_runtimes"]


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )


# What Codex passes to an MCP server besides the entry's own `env` (measured with 0.171.0).
_CODEX_SERVER_VARS = ("HOME", "PATH", "LANG", "TERM", "TMPDIR")
_SERVER_WAIT_S = 30.0
_MCP_HELLO = [
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "fedhpc-deliveries-check", "version": "1"},
        },
    },
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
]


def _program(command: str, env: dict[str, str]) -> str | None:
    """What a shell would run for `command`'s first word under `env` (leading VAR=value
    assignments skipped), or None when it finds nothing."""
    try:
        words = shlex.split(command)
    except ValueError:  # unbalanced quotes: a shell would refuse it too
        return None
    while words and re.match(r"[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        words.pop(0)
    if not words:
        return None
    if "/" in words[0]:
        return words[0] if os.access(words[0], os.X_OK) else None
    return shutil.which(words[0], path=env.get("PATH"))


def _await_tools(stdout: IO[bytes], end: float) -> list[str] | None:
    """The tool names of the `tools/list` answer (id 2) read from a server's stdout, or None
    when none came by `end` (monotonic seconds)."""
    buf = b""
    while (left := end - time.monotonic()) > 0 and select.select([stdout], [], [], left)[0]:
        chunk = os.read(stdout.fileno(), 65536)
        if not chunk:
            return None  # it ended
        buf += chunk
        for line in buf.splitlines():
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if isinstance(msg, dict) and msg.get("id") == 2:
                tools = (msg.get("result") or {}).get("tools") or []
                return [str(t.get("name")) for t in tools if isinstance(t, dict)]
    return None


def _tools_of(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[list[str], str]:
    """Start an MCP server over stdio, as a client would, and list its tools: (tool names,
    "") or ([], why not). Nothing but `initialize` and `tools/list` is asked."""
    pipe = subprocess.PIPE
    with subprocess.Popen(argv, cwd=cwd, env=env, stdin=pipe, stdout=pipe, stderr=pipe) as proc:
        stdin, stdout = proc.stdin, proc.stdout
        assert stdin is not None
        assert stdout is not None
        tools: list[str] | None = None
        try:
            stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in _MCP_HELLO))
            stdin.flush()
            tools = _await_tools(stdout, time.monotonic() + _SERVER_WAIT_S)
        except BrokenPipeError:
            pass  # it ended before reading: its status and stderr say why
        finally:
            try:  # a server that ended says why by its status (it may be exiting just now)
                ended: int | None = proc.wait(0.5 if tools is None else 0)
            except subprocess.TimeoutExpired:
                ended = None
            proc.kill()
            _, err = proc.communicate(timeout=5)
    if tools is not None:
        return tools, ""
    said = err.decode(errors="replace").strip()[-300:]
    why = f"exit {ended}" if ended is not None else f"no answer within {_SERVER_WAIT_S:g} s"
    return [], why + (f": {said}" if said else "")


def _codex_server(entry: dict[str, Any], env: dict[str, str], home: Path) -> list[str]:
    """Start Codex's registered fedhpc server the way a resumed Codex would (its command
    found on the resume PATH, Codex's short environment plus the entry's `env`): the fixes
    when it does not start or lists no fedhpc tools."""
    command = str(entry.get("command") or "")
    how = "`codex mcp add fedhpc -- fedhpc serve`"
    found = _program(shlex.quote(command), env) if command else None
    if not found:
        return [
            f"Codex's fedhpc server command {command!r} is not found on the resume PATH "
            f"({env.get('PATH')}): register it by name ({how}) or by an absolute path that "
            "exists, or add its folder to `path` under [resume.codex]"
        ]
    args = [str(a) for a in entry.get("args") or []]
    server_env = {k: env[k] for k in _CODEX_SERVER_VARS if k in env}
    server_env.update({str(k): str(v) for k, v in (entry.get("env") or {}).items()})
    try:
        tools, why = _tools_of([found, *args], server_env, home)
    except OSError as exc:
        tools, why = [], f"{type(exc).__name__}: {exc}"
    if not any(t in ("submit_task", "get_result") for t in tools):
        said = why or f"it listed no fedhpc tools ({len(tools)} tools)"
        return [f"Codex's fedhpc server `{command} {' '.join(args)}` did not start: {said}"]
    return []


def _claude_hooks(env: dict[str, str]) -> list[str]:
    """Claude's fedhpc hooks (user settings under the resume's HOME or CLAUDE_CONFIG_DIR) run
    as a resumed turn would run them: the fixes for those that cannot. `pre-tool-use` runs
    for real with another tool's input (it ignores it); the others are only looked up (a
    user-prompt-submit run would take the session's inbox)."""
    base = CLAUDE_CONFIG_DIR.read(env) or str(Path(env.get("HOME", "~")).expanduser() / ".claude")
    settings = Path(base) / "settings.json"
    try:
        hooks = json.loads(settings.read_text()).get("hooks") or {}
    except (OSError, ValueError, AttributeError):
        return []
    commands = [
        str(h.get("command", ""))
        for groups in hooks.values()
        if isinstance(groups, list)
        for g in groups
        if isinstance(g, dict)
        for h in g.get("hooks") or []
        if isinstance(h, dict) and "fedhpc" in str(h.get("command", ""))
    ]
    fixes: list[str] = []
    other = {"session_id": "check", "cwd": "/", "tool_use_id": "check", "tool_name": "check"}
    for command in dict.fromkeys(commands):
        why = "" if _program(command, env) else "not found on the resume PATH"
        if not why and "pre-tool-use" in command:
            out = subprocess.run(
                ["/bin/sh", "-c", command],
                env=env,
                input=json.dumps(other),
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            if out.returncode != 0 or out.stderr.strip():
                why = f"exit {out.returncode}: {out.stderr.strip()[-200:]}"
        if why:
            fixes.append(
                f"the Claude hook `{command}` in {settings} cannot run in a resume ({why}): "
                "write fedhpc's absolute path in it, or fix `path` under [resume.claude-code]"
            )
    return fixes


def _claude(exe: str, env: dict[str, str], home: Path, tmp: Path) -> tuple[bool, str, list[str]]:
    out = _run([exe, "auth", "status"], env)
    try:
        status: dict[str, Any] = json.loads(out.stdout or "{}")
    except json.JSONDecodeError:
        status = {}
    fixes: list[str] = []
    if not status.get("loggedIn"):
        fixes.append(
            "give resumes credentials: ANTHROPIC_API_KEY (and ANTHROPIC_BASE_URL if you use a "
            "gateway) in [resume.claude-code] env_file, or log in with `claude` as this user "
            "with the same HOME"
        )
    server = mcp_config(home, path=tmp / "mcp.json")  # not <home>/mcp.json: a resume may read it
    command = json.loads(server.read_text())["mcpServers"]["fedhpc"]["command"]
    if not Path(command).exists():
        fixes.append(f"the fedhpc MCP server command {command} does not exist: reinstall fedhpc")
    fixes += _claude_hooks(env)
    how = status.get("authMethod") or "none"
    return not fixes, f"{exe} ({out.stdout and 'auth ' + str(how)})", fixes


def _codex(
    exe: str, env: dict[str, str], home: Path, notes: list[str]
) -> tuple[bool, str, list[str]]:
    fixes: list[str] = []
    base = Path(CODEX_HOME.read(env) or Path(env.get("HOME", "~")).expanduser() / ".codex")
    try:
        config = tomllib.loads((base / "config.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError):
        config = {}
    entry = (config.get("mcp_servers") or {}).get("fedhpc")
    if not isinstance(entry, dict):
        fixes.append(
            f"register the server for Codex: `codex mcp add fedhpc -- fedhpc serve` "
            f"(config {base / 'config.toml'})"
        )
    elif "url" not in entry:
        fixes += _codex_server(entry, env, home)
    model = check_model(exe, env, config, str(base / "config.toml"), base)
    login = _run([exe, "login", "status"], env)
    if login.returncode != 0 and model.provider == "openai":
        fixes.append(
            "log in as this user (`codex login`) or set OPENAI_API_KEY in [resume.codex] env_file"
        )
    fixes += model.fixes
    notes += model.notes
    logged = "logged in" if login.returncode == 0 else "not logged in"
    detail = f"{exe} (provider {model.provider}, model {model.model or 'default'}, {logged})"
    return not fixes, detail, fixes


def check_runtimes(home: Path, only: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """One report per runtime: ok, what was found, and the fixes for what is missing."""
    reports: list[dict[str, Any]] = []
    try:
        config = load_user_config().resume
    except FedError as exc:
        return [
            {
                "runtime": "config",
                "ok": False,
                "detail": exc.message,
                "fix": [f"fix [resume] in {user_config_path()}"],
                "notes": [],
            }
        ]
    with tempfile.TemporaryDirectory(prefix="fedhpc-check-") as tmp:
        for runtime in (Runtime.CLAUDE_CODE, Runtime.CODEX):
            if only and runtime.value not in only:
                continue
            reports.append(_report(runtime, config.get(runtime.value), home, Path(tmp)))
    return reports


def _report(runtime: Runtime, cfg: ResumeRuntime, home: Path, tmp: Path) -> dict[str, Any]:
    """One runtime's report. Its PATH starts with a `fedhpc` made in `tmp` as a launch makes
    `<home>/bin/fedhpc`: nothing a running daemon uses is written. `notes` inform only."""
    notes: list[str] = []
    try:
        env = resume_env(cfg, home, bin_dir=fedhpc_bin(home, tmp / "bin"))
        exe = binary(runtime, cfg, env)
        version = _run([exe, "--version"], env)
        if version.returncode != 0:
            ok, detail = False, f"{exe} --version failed: {version.stderr.strip()[-200:]}"
            fixes = [f"set a working binary under [resume.{runtime.value}]"]
        elif runtime is Runtime.CLAUDE_CODE:
            ok, detail, fixes = _claude(exe, env, home, tmp)
        else:
            ok, detail, fixes = _codex(exe, env, home, notes)
        if version.returncode == 0:
            detail = f"{version.stdout.strip()[:60]} at {detail}"
    except FedError as exc:
        ok, detail, fixes = False, exc.message, [exc.hint or "see docs/continuation.md"]
    except (OSError, subprocess.TimeoutExpired) as exc:
        ok, detail = False, f"{type(exc).__name__}: {exc}"
        fixes = [f"set binary under [resume.{runtime.value}] in {user_config_path()}"]
    return {"runtime": runtime.value, "ok": ok, "detail": detail, "fix": fixes, "notes": notes}
