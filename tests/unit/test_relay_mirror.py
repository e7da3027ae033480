"""The relay's mirror (`fedhpc.client.relay.mirror`): the service's events into the local store
once each, whatever is read again (a relay killed before its acknowledgement reads the same
page once more), with the relay's continuation bound to each subject and the remote cursor
past the page; and the token file's checks."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp.shared.auth import OAuthToken

from fedhpc.client.relay import REMOTE, mirror, read_token
from fedhpc.client.relay_signin import FileTokens
from fedhpc.errors import UsageError
from fedhpc.ops.continuations import ContinuationSpec
from fedhpc.store import Store

SPEC = ContinuationSpec.model_validate({"runtime": "inbox", "inbox": "me"})


def _event(seq: int, kind: str, subject: str, **payload: object) -> dict[str, object]:
    return {
        "seq": seq,
        "id": f"e{seq}",
        "kind": kind,
        "subject": subject,
        "created_at": "2026-12-05T12:00:00+00:00",
        "payload": {"task_id": subject, "state": "completed", **payload},
    }


async def test_a_page_read_twice_is_kept_once_with_its_continuations(store: Store) -> None:
    page = [
        _event(7, "task.terminal", "t1"),
        _event(9, "group.round_terminal", "g1", task_id=None, group_id="g1"),
    ]
    assert await mirror(store, page, SPEC) == 2
    assert await mirror(store, page, SPEC) == 0  # killed before the ack: read again
    kept = await store.events_after(0)
    assert [(e.kind, e.subject) for e in kept] == [
        ("task.terminal", "t1"),
        ("group.round_terminal", "g1"),
    ]
    assert await store.cursor(REMOTE) == 9
    bound = {c["subject"] for c in await store.continuations_for(["t1", "g1"])}
    assert bound == {"t1", "g1"}


def test_a_token_file_must_be_private_and_hold_one_token(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("abc.def.ghi\n")
    token.chmod(0o600)
    assert read_token(token) == "abc.def.ghi"
    token.chmod(0o640)
    with pytest.raises(UsageError, match="may be read by others"):
        read_token(token)
    token.chmod(0o600)
    token.write_text("two tokens\n")
    with pytest.raises(UsageError, match="no single token"):
        read_token(token)
    with pytest.raises(UsageError, match="cannot read the token file"):
        read_token(tmp_path / "missing")


async def test_the_sign_ins_tokens_are_kept_0600_and_read_back(tmp_path: Path) -> None:
    store = FileTokens(tmp_path / "relay" / "oauth.json")
    assert await store.get_tokens() is None
    await store.set_tokens(OAuthToken(access_token="a.b.c", refresh_token="r", expires_in=60))
    got = await store.get_tokens()
    assert got is not None and (got.access_token, got.refresh_token) == ("a.b.c", "r")
    assert store.path.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "relay").stat().st_mode & 0o777 == 0o700
    store.path.write_text("{not json")  # a damaged file: signed in again, never a crash
    assert await store.get_tokens() is None
