"""The Tasks-extension signing key lives in the home: made once, 0600, the same for every
server process on that home (issue 36: handles outlive the server that minted them)."""

from __future__ import annotations

from pathlib import Path

from fedhpc.mcp_server.task_key import key_in


def test_the_key_is_made_once_private_and_read_back(tmp_path: Path) -> None:
    home = tmp_path / "h"
    key = key_in(home)
    assert len(key) == 32
    assert key_in(home) == key
    assert (home / "mcp-task-key").stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in home.iterdir()) == ["mcp-task-key"]  # no temporary left


def test_a_short_key_from_a_crash_is_replaced(tmp_path: Path) -> None:
    (tmp_path / "mcp-task-key").write_bytes(b"cut")
    key = key_in(tmp_path)
    assert len(key) == 32 and (tmp_path / "mcp-task-key").read_bytes() == key
