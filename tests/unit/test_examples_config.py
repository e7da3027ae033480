"""The client configuration in examples/config: it parses, its hook commands are real
`fedhpc hook` subcommands, and it says what docs/mcp.md and docs/continuation.md say."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

from fedhpc.cli.hooks import BIND_TOOLS
from fedhpc.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "config"


def _blocks(doc: str, lang: str) -> list[str]:
    text = (ROOT / "docs" / doc).read_text()
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.DOTALL)


def _hook_choices() -> set[str]:
    top = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    hook = top.choices["hook"]
    positional = next(a for a in hook._actions if a.choices and not a.option_strings)
    return set(positional.choices)


def test_mcp_json_is_the_one_in_docs_mcp_md() -> None:
    ours = json.loads((CONFIG / ".mcp.json").read_text())
    documented = [json.loads(b) for b in _blocks("mcp.md", "json") if "mcpServers" in b]
    assert documented == [ours]
    server = ours["mcpServers"]["fedhpc"]
    assert (server["type"], server["command"], server["args"]) == ("stdio", "fedhpc", ["serve"])


def test_codex_block_parses_and_matches_docs_mcp_md() -> None:
    ours = tomllib.loads((CONFIG / "codex-config.toml").read_text())
    documented = [tomllib.loads(b) for b in _blocks("mcp.md", "toml") if "mcp_servers" in b]
    assert documented == [ours]
    server = ours["mcp_servers"]["fedhpc"]
    assert (server["command"], server["args"], server["required"]) == ("fedhpc", ["serve"], True)
    assert server["default_tools_approval_mode"] == "approve"  # codex exec: tools that act


def test_claude_hooks_call_existing_fedhpc_hook_subcommands() -> None:
    ours: dict[str, Any] = json.loads((CONFIG / "claude-settings.json").read_text())
    documented = [json.loads(b) for b in _blocks("continuation.md", "json") if '"hooks"' in b]
    assert documented == [ours]
    hooks = ours["hooks"]
    assert set(hooks) == {"PreToolUse", "UserPromptSubmit"}
    (bind,) = hooks["PreToolUse"]
    assert bind["matcher"] == f"mcp__fedhpc__({'|'.join(BIND_TOOLS)})"  # the tools that start work
    for tool in BIND_TOOLS:
        assert re.fullmatch(bind["matcher"], f"mcp__fedhpc__{tool}"), tool
    assert not re.fullmatch(bind["matcher"], "mcp__fedhpc__get_result")
    commands = [h["command"] for entry in hooks.values() for m in entry for h in m["hooks"]]
    assert all(h["type"] == "command" for e in hooks.values() for m in e for h in m["hooks"])
    choices = _hook_choices()
    for command in commands:
        argv = shlex.split(command)
        assert argv[:2] == ["fedhpc", "hook"], command
        assert len(argv) == 3 and argv[2] in choices, (command, choices)
    assert {shlex.split(c)[2] for c in commands} == {"pre-tool-use", "user-prompt-submit"}
