"""The Codex thread is read from a tools/call's `_meta`; anything else yields None."""

from __future__ import annotations

from typing import Any

import pytest

from fedhpc.mcp_server import AgentSession, agent_session

THREAD = "019a7b1c-0000-7000-8000-00000000cafe"


def test_codex_thread_id_comes_from_thread_id_in_meta() -> None:
    meta = {
        "threadId": THREAD,
        "sessionId": THREAD,
        "progressToken": 3,
        "x-codex-turn-metadata": {"thread_id": THREAD, "turn_id": "7"},
    }
    assert agent_session(meta) == AgentSession(client="codex", thread_id=THREAD, turn_id="7")


def test_codex_turn_metadata_alone_is_enough() -> None:
    meta = {"x-codex-turn-metadata": {"thread_id": THREAD}}
    assert agent_session(meta) == AgentSession(client="codex", thread_id=THREAD)


@pytest.mark.parametrize(
    "meta",
    [
        None,
        {},
        {"claudecode/toolUseId": "toolu_01"},
        {"threadId": ""},
        {"threadId": 42},
        {"threadId": "x" * 500},
        {"threadId": "bad\nid"},
        {"x-codex-turn-metadata": "not a mapping"},
        ["threadId", THREAD],
    ],
)
def test_anything_else_yields_no_session(meta: Any) -> None:
    assert agent_session(meta) is None
