"""An allocation's burn-down against its expiry (placement/burn.py): the pace it is spent at,
the even pace to its last day, and when it runs out at that pace, above its reserve."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from fedhpc.cli.daemon import burn_lines
from fedhpc.placement.burn import burn_down

NOW = datetime(2027, 1, 1, tzinfo=UTC)
END = date(2027, 1, 10)  # 10 days left, counting the last one whole


def _points(*lefts: float | None) -> list[tuple[datetime, float | None]]:
    """One probe a day up to NOW, the last at NOW."""
    n = len(lefts)
    return [(NOW - timedelta(days=n - 1 - i), v) for i, v in enumerate(lefts)]


def test_spending_faster_than_the_even_pace_runs_out_before_the_expiry() -> None:
    b = burn_down(_points(100, 80, 60), expires=END, reserve=0, now=NOW, unit="SU")
    assert b.recent_per_day == pytest.approx(20)
    assert b.left == 60 and b.even_per_day == pytest.approx(6, rel=0.01)
    assert b.runs_out is not None and b.runs_out.startswith("2027-01-04")
    assert b.unused_at_expiry is None
    assert "runs out on 2027-01-04, 6 days before it expires" in b.verdict


def test_spending_slowly_leaves_credit_unspent_and_the_reserve_is_never_counted() -> None:
    b = burn_down(_points(100, 99, 98), expires=END, reserve=50, now=NOW, unit="SU")
    assert b.left == 48  # above the reserve
    assert b.runs_out is None and b.unused_at_expiry == pytest.approx(38, abs=0.1)
    assert "would be left unspent on 2027-01-10" in b.verdict


def test_no_pace_yet_nothing_spent_and_an_expired_allocation_say_so() -> None:
    one = burn_down(_points(100), expires=END, reserve=0, now=NOW, unit="SU")
    assert one.recent_per_day is None and "one probe: no pace yet" in one.verdict
    idle = burn_down(_points(100, 100), expires=END, reserve=0, now=NOW, unit="SU")
    assert idle.unused_at_expiry == 100 and "nothing spent lately" in idle.verdict
    late = burn_down(_points(100, 90), expires=date(2026, 12, 1), reserve=0, now=NOW, unit="SU")
    assert late.days_left == 0 and late.verdict.startswith("expired on 2026-12-01")
    none = burn_down(_points(None, None), expires=END, reserve=0, now=NOW, unit="SU")
    assert none.left is None and none.verdict == "no credit read"


def test_status_prints_one_line_per_expiring_allocation() -> None:
    b = burn_down(_points(100, 80, 60), expires=END, reserve=0, now=NOW, unit="SU")
    lines = burn_lines({"devdelta": {"bbka-gpu": b.as_dict()}, "devanvil": {}})
    assert lines[1] == "Allocations that expire (at the pace of the recent probes):"
    assert lines[2] == (
        "  devdelta bbka-gpu: expires 2027-01-10 (10 days left): at 20.00 SU/day it runs out "
        "on 2027-01-04, 6 days before it expires"
    )
    assert burn_lines({}) == []
