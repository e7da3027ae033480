"""Logs with causes: a logged exception carries its traceback in its line, a failure that
repeats every second is written once per window with its count, and the newest errors are
kept for `fedhpc daemon status`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from fedhpc.logs import Repeats, configure_logging, recent_errors


@pytest.fixture
def restore_structlog() -> Iterator[None]:
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


def _boom() -> None:
    raise ValueError("memory.min: 1 MiB looks like a unit slip")


def test_a_logged_exception_carries_its_traceback_and_task_id(
    capsys: pytest.CaptureFixture[str], restore_structlog: None
) -> None:
    configure_logging("info")
    log = structlog.get_logger("test")
    try:
        _boom()
    except ValueError:
        log.exception("placement failed", task="t123")
    err = capsys.readouterr().err
    assert "exc_info=True" not in err  # the old line said only this
    assert "task='t123'" in err
    assert "Traceback (most recent call last)" in err
    assert "in _boom" in err and "ValueError: memory.min: 1 MiB" in err
    assert len(err.strip().splitlines()) == 1  # one line per event, greppable


def test_a_failure_repeating_each_second_is_written_once_per_window_with_its_count() -> None:
    now = [0.0]
    repeats = Repeats(window_s=60, clock=lambda: now[0])

    def one() -> dict[str, Any] | None:
        try:
            _boom()
        except ValueError:
            event: dict[str, Any] = {"event": "placement pass failed", "exc_info": True}
            try:
                return dict(repeats(None, "error", event))
            except structlog.DropEvent:
                return None
        return None

    written = []
    for second in range(130):
        now[0] = float(second)
        if (line := one()) is not None:
            written.append((second, line.get("repeated")))
    assert written == [(0, None), (60, 59), (120, 59)]
    kept = list(repeats.recent)
    assert len(kept) == 1 and kept[0]["count"] == 130
    assert kept[0]["error"].startswith("ValueError: memory.min")


def test_different_failures_and_info_lines_are_never_merged() -> None:
    repeats = Repeats(window_s=60, clock=lambda: 0.0)
    for site in ("alpha", "beta"):
        assert repeats(None, "warning", {"event": "observe failed", "site": site})
    for _ in range(3):
        assert repeats(None, "info", {"event": "probed", "site": "alpha"})
    with pytest.raises(structlog.DropEvent):
        repeats(None, "warning", {"event": "observe failed", "site": "alpha"})
    assert list(repeats.recent) == []  # warnings are not errors


def test_recent_errors_lists_what_the_process_logged(
    capsys: pytest.CaptureFixture[str], restore_structlog: None
) -> None:
    configure_logging("info")
    try:
        _boom()
    except ValueError:
        structlog.get_logger("test").exception("bridge cycle failed", delivery="d9")
    latest = recent_errors()[-1]
    assert latest["event"] == "bridge cycle failed"
    assert latest["context"]["delivery"] == "d9"
    assert latest["error"].startswith("ValueError")
    assert "kind" not in latest


def test_daemon_status_shows_each_kind_of_error_once_with_its_count_and_no_escapes() -> None:
    from fedhpc.cli.daemon import _status_lines

    health = {
        "started_at": "2026-12-04T10:00:00+00:00",
        "cycles": 12,
        "cycle_s": 1,
        "sites": ["alpha"],
        "errors": [
            {
                "event": "placement failed",
                "error": "RuntimeError: \x1b]0;pwned\x07bad",
                "context": {"task": "t1"},
                "count": 7,
                "last_at": 990.0,
            }
        ],
    }
    lines = _status_lines(health, 42, now=1000.0)
    assert lines[0].startswith("daemon running (pid 42) since 2026-12-04T10:00:00")
    shown = "  placement failed: RuntimeError: \\x1b]0;pwned\\x07bad [7x, last 10 s ago] task=t1"
    assert shown in lines
    assert not any("\x1b" in line for line in lines)
    quiet = _status_lines({**health, "errors": []}, 42, now=1000.0)
    assert quiet[-1] == "no errors logged since it started"
