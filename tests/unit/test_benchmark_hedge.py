"""benchmarks/hedge_policy.py, the `daemon+hedge` row of matched_rounds.py: the copies are the
daemon's own arithmetic on the round's inputs, and the copy that started first is the pick."""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

from fedhpc.placement import PlacementInputs, Policy
from tests.unit.test_placement_world import (
    NOW,
    cpu_partition,
    env,
    profile,
    site,
    snapshot,
    state,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from hedge_policy import hedge_copies, winner

ALPHA = site(profile("alpha", cpu_partition("p")))
BETA = site(profile("beta", cpu_partition("p")))


def _inputs() -> PlacementInputs:
    snap = snapshot(state(ALPHA.profile), state(BETA.profile))
    return PlacementInputs(snap, {"alpha": ALPHA, "beta": BETA}, Policy(), now=NOW)


def test_a_copy_is_added_only_when_it_gains_enough() -> None:
    one = env(cpus=1, wall_time="1h")
    # Two idle sites: the waits are known (0), a copy gains nothing.
    assert hedge_copies(one, _inputs(), "alpha/p", copies=2, min_gain_s=15).keys == ("alpha/p",)
    # Any gain at all (0): the other site's best placement is the copy.
    got = hedge_copies(one, _inputs(), "alpha/p", copies=2, min_gain_s=0)
    assert got.keys == ("alpha/p", "beta/p")
    assert hedge_copies(one, _inputs(), "alpha/p", copies=1, min_gain_s=0).keys == ("alpha/p",)


def test_the_copy_that_started_first_wins_else_the_daemons_pick() -> None:
    keys = ("alpha/p", "beta/p")
    assert winner(keys, {"alpha/p": NOW, "beta/p": NOW - timedelta(seconds=3)}) == "beta/p"
    assert winner(keys, {"alpha/p": NOW, "beta/p": None}) == "alpha/p"
    assert winner(keys, {"alpha/p": NOW, "beta/p": NOW}) == "alpha/p"  # a tie: the pick
    assert winner(keys, {}) == "alpha/p"
