"""A site's array cap learned from refusals: halved on each, doubled back after each hour
without one, gone when it is back at the full size; other sites untouched."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fedhpc.adapters.arrays import ARRAY_MAX
from fedhpc.orchestrator.array_caps import HOLD, ArrayCaps

T0 = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def test_a_refusal_halves_the_cap_and_an_hour_without_one_doubles_it_back() -> None:
    caps = ArrayCaps()
    assert caps.most("a", T0) == ARRAY_MAX
    assert caps.refused("a", 8, T0) == 4
    assert caps.refused("a", 4, T0 + timedelta(minutes=1)) == 2
    assert caps.most("a", T0 + HOLD) == 2  # an hour after the *last* refusal, not the first
    assert caps.most("a", T0 + timedelta(minutes=1) + HOLD) == 4
    assert caps.most("a", T0 + timedelta(minutes=1) + 3 * HOLD) == 16  # one doubling per hour
    assert caps.most("b", T0) == ARRAY_MAX  # another site is never capped by a's refusals


def test_a_refusal_after_the_cap_grew_halves_what_was_refused() -> None:
    caps = ArrayCaps()
    caps.refused("a", 8, T0)
    assert caps.most("a", T0 + HOLD) == 8  # grown back to 8: tried once more
    assert caps.refused("a", 8, T0 + HOLD) == 4  # the site still refuses 8: halved again
    assert caps.most("a", T0 + HOLD + timedelta(minutes=59)) == 4


def test_a_cap_under_two_means_no_arrays_until_it_doubles_back_to_the_full_size() -> None:
    caps = ArrayCaps()
    assert caps.refused("a", 3, T0) == 1
    assert caps.most("a", T0 + 10 * HOLD) == ARRAY_MAX
    assert caps.caps == {}  # nothing left to remember
