"""The real agent CLIs set up offline, shared by the E2E tests (test_e2e_claude.py,
test_e2e_codex.py, test_skills_listing.py) and benchmarks/continuation_cli.py: Claude Code's
environment against a fake model, the argv of a first Claude turn with fedhpc's MCP server and
PreToolUse hook, Codex's config.toml for a fake Responses API (with fedhpc's server or
without), the `[resume.<runtime>]` sections of fedhpc's own config, and a reader of what
`codex exec --json` printed (its thread, its MCP tool calls)."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedhpc.cli.hooks import BIND_TOOLS

__all__ = [
    "HOOK_MATCHER",
    "VENV_BIN",
    "claude_env",
    "claude_turn_argv",
    "codex_calls",
    "codex_config",
    "codex_lines",
    "codex_thread",
    "resume_section",
    "write_config",
]

VENV_BIN = str(Path(sys.executable).parent)
# The PreToolUse matcher docs/continuation.md and examples/config/claude-settings.json give.
HOOK_MATCHER = f"mcp__fedhpc__({'|'.join(BIND_TOOLS)})"


def claude_env(home: Path) -> dict[str, str]:
    """Claude Code kept on its own folders and off the network (no telemetry, updates or error
    reports), waiting up to 60 s for an `alwaysLoad` MCP server. The caller adds the fake
    model's ANTHROPIC_BASE_URL and key."""
    return {
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "MCP_CONNECT_TIMEOUT_MS": "60000",
    }


def claude_turn_argv(
    exe: Path | str,
    prompt: str,
    session: str,
    *,
    serve: Sequence[str],
    fedhome: Path,
    hook: str | None = HOOK_MATCHER,
) -> list[str]:
    """`claude -p` creating `session` with fedhpc's server (`serve` is its argv, loaded before
    the turn: `alwaysLoad`) as the only MCP server, its tools allowed, and fedhpc's PreToolUse
    hook on the tools `hook` matches (None: no hook)."""
    mcp = {
        "mcpServers": {
            "fedhpc": {
                "type": "stdio",
                "command": serve[0],
                "args": list(serve[1:]),
                "env": {"FEDHPC_HOME": str(fedhome)},
                "alwaysLoad": True,
            }
        }
    }
    command = {"type": "command", "command": f"{VENV_BIN}/fedhpc hook pre-tool-use"}
    hooks = {"PreToolUse": [{"matcher": hook, "hooks": [command]}]} if hook else {}
    return [
        str(exe),
        "-p",
        prompt,
        "--output-format",
        "json",
        "--session-id",
        session,
        "--mcp-config",
        json.dumps(mcp),
        "--strict-mcp-config",
        "--allowedTools",
        "mcp__fedhpc",
        "--settings",
        json.dumps({"hooks": hooks}),
    ]


def codex_config(
    codex_home: Path,
    model_url: str,
    *,
    serve: Sequence[str] | None = None,
    server_env: Mapping[str, str] | None = None,
    approve: Sequence[str] | None = None,
) -> Path:
    """`CODEX_HOME/config.toml`: the fake Responses API at `model_url` (key in
    FAKE_OPENAI_API_KEY, no retries), nothing else reached; with `serve` (its argv), fedhpc's
    MCP server, required before the first turn, with `server_env`. `codex exec` (approval
    policy never) refuses every tool not read-only unless approved: the tools named in
    `approve`, or all of them (None)."""
    lines = [
        'model = "fake-model"',
        'model_provider = "fakeoai"',
        'approval_policy = "never"',
        "check_for_update_on_startup = false",
        "",
        # Off, or Codex calls chatgpt.com, ab.chatgpt.com and github.com (seen by ProxyTrap).
        "[analytics]",
        "enabled = false",
        "",
        "[features]",
        "plugins = false",
        "apps = false",
        "",
        "[model_providers.fakeoai]",
        'name = "fake"',
        f'base_url = "{model_url}/v1"',
        'wire_api = "responses"',
        'env_key = "FAKE_OPENAI_API_KEY"',
        "request_max_retries = 0",
        "stream_max_retries = 0",
    ]
    if serve is not None:
        lines += [
            "",
            "[mcp_servers.fedhpc]",
            f"command = {json.dumps(serve[0])}",
            f"args = {json.dumps(list(serve[1:]))}",
            "required = true",  # else the first turn may start before the tools are listed
            "startup_timeout_sec = 30",
        ]
        if approve is None:
            lines.append('default_tools_approval_mode = "approve"')
        lines += ["", "[mcp_servers.fedhpc.env]"]
        lines += [f"{k} = {json.dumps(v)}" for k, v in (server_env or {}).items()]
        for tool in approve or ():
            lines += ["", f"[mcp_servers.fedhpc.tools.{tool}]", 'approval_mode = "approve"']
    codex_home.mkdir(parents=True, exist_ok=True)
    path = codex_home / "config.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def resume_section(
    runtime: str,
    binary: Path | str,
    env: Mapping[str, str],
    *,
    env_file: Path | None = None,
    path: str | None = f"{VENV_BIN}:/usr/bin:/bin",
) -> list[str]:
    """The `[resume.<runtime>]` lines of fedhpc's config: the CLI, its PATH (None: the
    default), its credentials' file and the rest of its environment."""
    lines = [f"[resume.{runtime}]", f"binary = {json.dumps(str(binary))}"]
    if path is not None:
        lines.append(f"path = {json.dumps(path)}")
    if env_file is not None:
        lines.append(f"env_file = {json.dumps(str(env_file))}")
    lines.append(f"[resume.{runtime}.env]")
    lines += [f"{k} = {json.dumps(v)}" for k, v in env.items()]
    return lines


def write_config(fedhome: Path, *sections: list[str]) -> Path:
    """fedhpc's config.toml in `fedhome`, of these sections."""
    path = fedhome / "config.toml"
    path.write_text("\n".join(line for s in sections for line in s) + "\n")
    return path


def codex_lines(text: str) -> list[dict[str, Any]]:
    """The JSON events `codex exec --json` printed (its stdout, or a resume's `out` file)."""
    return [json.loads(x) for x in text.splitlines() if x.startswith("{")]


def codex_thread(lines: list[dict[str, Any]]) -> str:
    """The thread (session) id the turn ran in."""
    return str(next(x["thread_id"] for x in lines if x["type"] == "thread.started"))


def codex_calls(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The turn's finished MCP tool calls (`tool`, `status`, ...), in order."""
    return [
        x["item"]
        for x in lines
        if x["type"] == "item.completed" and x["item"].get("type") == "mcp_tool_call"
    ]
