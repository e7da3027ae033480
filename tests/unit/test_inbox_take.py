"""The inbox a UserPromptSubmit hook drains: taken whole while the bridge appends, no event is
lost or seen twice (a writer process against a reader, both the real functions)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fedhpc.bridge.check import check_runtimes
from fedhpc.cli.hooks import user_prompt_submit
from fedhpc.inbox import append_line, take_lines

WRITER = """
import sys
from pathlib import Path
from fedhpc.inbox import append_line
path, n = Path(sys.argv[1]), int(sys.argv[2])
for i in range(n):
    append_line(path, '{"delivery":"d%d"}' % i)
"""


def test_an_event_appended_while_the_hook_takes_the_inbox_is_never_lost(tmp_path: Path) -> None:
    path = tmp_path / "inbox" / "s1.jsonl"
    path.parent.mkdir()
    n = 3000
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(n)])
    got: list[str] = []
    while writer.poll() is None:
        got += take_lines(path)
    assert writer.wait() == 0
    got += take_lines(path)
    assert [json.loads(x)["delivery"] for x in got] == [f"d{i}" for i in range(n)]
    assert list(path.parent.iterdir()) == []  # no private copy left behind


def test_the_hook_injects_what_the_bridge_appended_and_leaves_the_inbox_empty(
    tmp_path: Path,
) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    append_line(inbox / "s1.jsonl", '{"delivery":"d1"}')
    out = user_prompt_submit(json.dumps({"session_id": "s1"}), tmp_path)
    assert out is not None
    assert '"delivery":"d1"' in json.loads(out)["hookSpecificOutput"]["additionalContext"]
    assert list(inbox.iterdir()) == []
    assert user_prompt_submit(json.dumps({"session_id": "s1"}), tmp_path) is None


def test_deliveries_check_never_rewrites_the_mcp_config_a_resume_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "h"
    home.mkdir()
    shared = home / "mcp.json"
    warm = '{"mcpServers": {"fedhpc": {"type": "http", "url": "http://127.0.0.1:1/mcp"}}}'
    shared.write_text(warm)  # what the bridge wrote for the warm server
    claude = tmp_path / "claude"  # answers --version and `auth status` like the CLI
    claude.write_text('#!/bin/sh\necho \'{"loggedIn": true, "authMethod": "api_key"}\'\n')
    claude.chmod(0o755)
    monkeypatch.setenv("FEDHPC_CLAUDE_BIN", str(claude))
    monkeypatch.setenv("FEDHPC_CONFIG", str(tmp_path / "none.toml"))
    (report,) = check_runtimes(home, only=("claude-code",))
    assert report["runtime"] == "claude-code", report
    assert shared.read_text() == warm
    assert sorted(p.name for p in home.iterdir()) == ["mcp.json"]
