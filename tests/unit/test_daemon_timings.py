"""RequestTimes: the daemon's own answer times, newest first out of a bounded window."""

from __future__ import annotations

from fedhpc.daemon.timings import RequestTimes


def test_the_window_keeps_the_newest_answers_and_counts_them_all() -> None:
    times = RequestTimes(kept=100)
    for i in range(150):
        times.add("GET /v1/tasks", float(i))
    s = times.summary()
    assert (s["answered"], s["window"]) == (150, 100)
    assert s["max_ms"] == 149.0  # the oldest 50 (0..49) left the window
    assert 50.0 <= s["p50_ms"] <= s["p99_ms"] <= 149.0


def test_the_slowest_answer_names_its_route() -> None:
    times = RequestTimes()
    times.add("GET /v1/health", 2.0)
    times.add("GET /v1/groups/{group_id}", 40.0)
    times.add("GET /v1/health", 3.0)
    s = times.summary()
    assert s["slowest_route"] == "GET /v1/groups/{group_id}"
    assert s["max_ms"] == 40.0


def test_no_quantiles_before_two_answers() -> None:
    times = RequestTimes()
    assert times.summary() == {"answered": 0, "window": 0}
    times.add("GET /v1/health", 1.0)
    assert times.summary() == {"answered": 1, "window": 1}
