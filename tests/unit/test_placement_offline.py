"""A site that does not answer has one reason in a decision: it is offline (or not probed
yet). Its accounts are unknown then, not missing: placement never adds "no account known"."""

from __future__ import annotations

from fedhpc.domain import Health, SiteState
from fedhpc.domain.config import Site
from fedhpc.domain.site import SiteProfile
from fedhpc.placement import (
    Category,
    Outcome,
    PlacementInputs,
    Policy,
    PolicyKind,
    Unschedulable,
    place,
)
from tests.unit.test_placement_world import NOW, cpu_partition, env, profile, site, snapshot, state


def _needs_account(name: str) -> SiteProfile:
    p = profile(name, cpu_partition("cpu"))
    conventions = p.conventions.model_copy(update={"account_required": True})
    return p.model_copy(update={"conventions": conventions})


ALPHA = _needs_account("alpha")  # accounts come from its probe: none configured
BETA = profile("beta", cpu_partition("cpu"))
SITES: dict[str, Site] = {"alpha": site(ALPHA), "beta": site(BETA)}
PINNED = Policy(kind=PolicyKind.FIXED_SITE, site="alpha", fallback=False)
DOWN = SiteState(
    site="alpha", health=Health.OFFLINE, collected_at=NOW, error="probe failed: ssh: refused"
)


def _pinned(*states: SiteState) -> Unschedulable:
    decision = place(env(cpus=4), PlacementInputs(snapshot(*states), SITES, PINNED, now=NOW))
    assert isinstance(decision, Unschedulable)
    return decision


def test_an_offline_site_is_rejected_only_for_being_offline() -> None:
    u = _pinned(DOWN, state(BETA))
    assert u.trace.site_reasons("alpha") == ["alpha is offline: probe failed: ssh: refused"]
    (alpha,) = [c for c in u.trace.candidates if c.site == "alpha"]
    auth = next(r for r in alpha.rules if r.category is Category.AUTHORIZATION)
    assert auth.outcome is Outcome.NOTE and "unknown until alpha answers" in auth.reason
    assert "no account known" not in u.hint
    assert "fail only on health: wait for the site" in u.hint
    assert "placed when one answers again" in u.hint


def test_a_site_never_probed_is_rejected_only_for_the_missing_probe() -> None:
    u = _pinned(state(BETA))
    assert u.trace.site_reasons("alpha") == ["no probe of alpha in the snapshot"]
    assert "wait for the site" not in u.hint  # not offline: the snapshot lacks it


def test_an_answering_site_that_lists_no_account_still_says_to_add_one() -> None:
    u = _pinned(state(ALPHA, accounts=()), state(BETA))
    assert u.trace.site_reasons("alpha") == [
        "no account known for alpha: add one under sites.alpha.accounts"
    ]


def test_a_site_whose_probe_could_not_read_the_accounts_is_not_told_to_add_one() -> None:
    """sshare refused (a rate limiter, a timeout) while the rest was read: the accounts are
    unknown, so the agent is never told to add one; the task waits for a probe that reads them."""
    u = _pinned(state(ALPHA, accounts=(), unread=("accounts",)), state(BETA))
    assert u.trace.site_reasons("alpha") == [
        "alpha's last probe could not read your accounts; asked again"
    ]
    assert "add one under" not in u.hint


def test_an_offline_site_that_fails_other_rules_too_is_not_advised_to_be_waited_for() -> None:
    """Pinned to an offline site that could never run cpus=100000: every candidate fails more
    than one rule and health won the tie, so it was told to wait, yet it is unschedulable."""
    inputs = PlacementInputs(snapshot(DOWN), {"alpha": SITES["alpha"]}, PINNED, now=NOW)
    u = place(env(cpus=100000), inputs)
    assert isinstance(u, Unschedulable)
    assert "fails more than one rule; most often health" in u.hint
    assert "wait for the site" not in u.hint and "placed when one answers" not in u.hint
    assert "its answering again would not place the task" in u.hint
