"""`fedhpc deliveries check`: start each resume runtime the way the daemon would (its binary,
the `[resume]` environment, no model request) and say what is missing, with the fix."""

from __future__ import annotations

import json
import subprocess
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from fedhpc.bridge.runtimes import binary, mcp_config, resume_env
from fedhpc.errors import FedError
from fedhpc.ops.continuations import Runtime
from fedhpc.profiles.loader import load_user_config, user_config_path
from fedhpc.settings import CODEX_HOME

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


def _claude(exe: str, env: dict[str, str], home: Path) -> tuple[bool, str, list[str]]:
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
    with tempfile.TemporaryDirectory(prefix="fedhpc-check-") as tmp:  # not <home>/mcp.json:
        server = mcp_config(home, path=Path(tmp) / "mcp.json")  # a resume may be reading it
        command = json.loads(server.read_text())["mcpServers"]["fedhpc"]["command"]
    if not Path(command).exists():
        fixes.append(f"the fedhpc MCP server command {command} does not exist: reinstall fedhpc")
    how = status.get("authMethod") or "none"
    return not fixes, f"{exe} ({out.stdout and 'auth ' + str(how)})", fixes


def _codex(exe: str, env: dict[str, str]) -> tuple[bool, str, list[str]]:
    fixes: list[str] = []
    base = Path(CODEX_HOME.read(env) or Path(env.get("HOME", "~")).expanduser() / ".codex")
    try:
        config = tomllib.loads((base / "config.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError):
        config = {}
    if "fedhpc" not in (config.get("mcp_servers") or {}):
        fixes.append(
            f"register the server for Codex: `codex mcp add fedhpc -- fedhpc serve` "
            f"(config {base / 'config.toml'})"
        )
    provider = config.get("model_provider")
    login = _run([exe, "login", "status"], env)
    if login.returncode != 0 and provider in (None, "openai"):
        fixes.append(
            "log in as this user (`codex login`) or set OPENAI_API_KEY in [resume.codex] env_file"
        )
    logged = "logged in" if login.returncode == 0 else "not logged in"
    detail = f"{exe} (provider {provider or 'openai'}, {logged})"
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
            }
        ]
    for runtime in (Runtime.CLAUDE_CODE, Runtime.CODEX):
        if only and runtime.value not in only:
            continue
        cfg = config.get(runtime.value)
        try:
            env = resume_env(cfg, home)
            exe = binary(runtime, cfg, env)
            version = _run([exe, "--version"], env)
            if version.returncode != 0:
                ok, detail = False, f"{exe} --version failed: {version.stderr.strip()[-200:]}"
                fixes = [f"set a working binary under [resume.{runtime.value}]"]
            elif runtime is Runtime.CLAUDE_CODE:
                ok, detail, fixes = _claude(exe, env, home)
            else:
                ok, detail, fixes = _codex(exe, env)
            if version.returncode == 0:
                detail = f"{version.stdout.strip()[:60]} at {detail}"
        except FedError as exc:
            ok, detail, fixes = False, exc.message, [exc.hint or "see docs/continuation.md"]
        except (OSError, subprocess.TimeoutExpired) as exc:
            ok, detail = False, f"{type(exc).__name__}: {exc}"
            fixes = [f"set binary under [resume.{runtime.value}] in {user_config_path()}"]
        reports.append({"runtime": runtime.value, "ok": ok, "detail": detail, "fix": fixes})
    return reports
