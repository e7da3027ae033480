"""The Tasks extension's pure parts: handles bound to a session, the events a stream hears,
and pollIntervalMs from the predicted time left (docs/mcp.md, "Tasks extension")."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ResourceUpdated

from fedhpc.domain.job import JobState, Shape
from fedhpc.mcp_server.task_state import Handle, _poll_s, mint, parse
from fedhpc.mcp_server.task_stream import _Route, _subjects
from fedhpc.ops.task_views import AttemptView, ResultManifest

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)


def test_a_handle_reads_back_only_in_the_session_that_made_it() -> None:
    tid = mint("g", "g0123456789a", "process")
    assert parse(tid, "process") == Handle("g", "g0123456789a")
    assert parse(tid, "process").uri == "fedhpc://groups/g0123456789a"
    kind, fid, mac = tid.split(".")
    for other, owner in (
        (tid, "http:another-session"),  # another session's handle
        (fid, "process"),  # a bare fedhpc id
        (f"t.{fid}.{mac}", "process"),  # the mac of another kind
        (f"{kind}.{fid}.{'0' * len(mac)}", "process"),  # forged
        ("x" * 500, "process"),
    ):
        with pytest.raises(MCPError) as missing:
            parse(other, owner)
        assert missing.value.error.code == -32602
        data: Any = missing.value.error.data
        assert data["code"] == "not_found"
        assert data["hint"]


def test_a_childs_event_is_about_its_group_too() -> None:
    about = _subjects({"subject": "tabc123-07", "payload": {}})
    assert about == {"tabc123-07", "gabc123"}
    assert _subjects({"subject": "gabc", "payload": {"task_ids": ["x"], "group_id": "gabc"}}) == {
        "gabc"
    }
    assert _subjects({"subject": "x9", "payload": {"task_id": "t1"}}) == {"x9", "t1"}


def test_a_stream_hears_wake_events_changes_and_its_resources() -> None:
    got: list[Any] = []
    handles = {"t.t1.m": Handle("t", "t1"), "g.gabc.m": Handle("g", "gabc")}
    uris = frozenset({"fedhpc://transfers/x9", "fedhpc://federation", "fedhpc://nope/1"})
    route = _Route(handles, uris, got.append)
    assert route.wanted
    ev = {"id": "ev_1", "kind": "task.terminal", "subject": "t1", "payload": {}}
    route(ev)
    assert got == [("wake", "t.t1.m", ev)]
    got.clear()
    child = {"id": "ev_2", "kind": "task.submitted", "subject": "tabc-1", "payload": {}}
    route(child)
    assert got == [("change", "g.gabc.m", child)]
    got.clear()
    route({"id": "ev_3", "kind": "transfer.succeeded", "subject": "x9", "payload": {}})
    route({"id": "ev_4", "kind": "site.offline", "subject": "delta", "payload": {}})
    route({"id": "ev_5", "kind": "task.terminal", "subject": "t2", "payload": {}})
    assert got == [
        ResourceUpdated(uri="fedhpc://transfers/x9"),
        ResourceUpdated(uri="fedhpc://federation"),
    ]
    assert not _Route({}, frozenset(), got.append).wanted


def _manifest(**attempt: Any) -> ResultManifest:
    a = AttemptView(n=1, site="delta", partition="gpu", state=JobState.RUNNING, **attempt)
    return ResultManifest(task_id="t1", state=a.state, attempts=(a,))


@pytest.mark.parametrize(
    ("attempt", "poll"),
    [
        ({"shape": Shape(wall_time_s=600), "started_at": NOW - timedelta(seconds=100)}, 125.0),
        ({"shape": Shape(wall_time_s=600), "started_at": NOW - timedelta(seconds=590)}, 60.0),
        ({"shape": Shape(wall_time_s=600), "submitted_at": NOW - timedelta(seconds=200)}, 200.0),
        ({"shape": Shape(wall_time_s=86400), "started_at": NOW}, 900.0),
    ],
)
def test_poll_interval_is_a_quarter_of_the_time_left_never_below_the_refresh(
    attempt: dict[str, Any], poll: float
) -> None:
    assert _poll_s(_manifest(**attempt), 60.0, NOW) == poll


def test_poll_interval_without_an_attempt_is_the_refresh() -> None:
    assert _poll_s(None, 2.0, NOW) == 2.0
    assert _poll_s(ResultManifest(task_id="t1", state=JobState.QUEUED), 60.0, NOW) == 60.0
