"""The bridge's typed delivery records: a stored row is read into fields and written back
exactly as it was (no key added, unknown keys kept), and changes land in the stored body."""

from __future__ import annotations

from typing import Any

from fedhpc.bridge.delivery import Delivery, DeliveryBody


def _row(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "d7-c1",
        "event_id": "e7",
        "continuation_id": "c1",
        "state": "pending",
        "attempts": 1,
        "next_at": "2026-12-04T10:00:00+00:00",
        "updated_at": "2026-12-04T09:59:00+00:00",
        "body": body,
    }


ROUTED = {
    "payload": {"fedhpc": "continuation", "delivery": "d7-c1", "task_id": "t1"},
    "runtime": "claude-code",
    "spec": {"runtime": "claude-code", "session_id": "s1", "cwd": "/p"},
    "seq": 7,
    "kind": "task.terminal",
    "subject": "t1",
    "key": "claude-code:s1",
}


def test_a_routed_row_is_read_into_fields_and_written_back_unchanged() -> None:
    d = Delivery.from_row(_row(dict(ROUTED)))
    assert (d.id, d.attempts, d.body.seq, d.body.key) == ("d7-c1", 1, 7, "claude-code:s1")
    assert (d.body.launched, d.body.held, d.body.resume, d.body.unreached) == (
        False,
        False,
        None,
        0,
    )
    assert d.body.dump() == ROUTED  # nothing added: the stored JSON stays as it was
    assert d.queue == "claude-code:s1"


def test_changes_land_in_the_body_and_unknown_keys_are_kept() -> None:
    d = Delivery.from_row(_row({**ROUTED, "from_a_newer_fedhpc": [1, 2]}))
    d.body.resume, d.body.launched, d.body.held = "r7-abc", True, False
    d.body.tools_verified = None  # Codex: unknown, stored as null as before
    dumped = d.body.dump()
    assert dumped["from_a_newer_fedhpc"] == [1, 2]
    assert (dumped["resume"], dumped["launched"], dumped["held"]) == ("r7-abc", True, False)
    assert "tools_verified" in dumped and dumped["tools_verified"] is None
    again = d.body.without("resume")
    assert "resume" not in again.dump() and again.resume is None
    assert again.dump()["launched"] is True


def test_a_row_without_a_session_key_queues_by_its_continuation() -> None:
    d = Delivery.from_row(_row({"payload": {}, "spec": {}, "seq": 3}))
    assert d.queue == "continuation:c1"
    assert DeliveryBody().dump() == {}
