"""A probe that read the site but not all of it keeps the last reading of what it missed
(`carry_forward`); and the collector applies it to a real probe answer whose sshare was
refused, so the user's accounts never vanish for one refused command."""

from __future__ import annotations

from fedhpc.collector.carry import carry_forward
from fedhpc.domain import Credit, Health, SiteState
from tests.unit.test_placement_world import NOW, cpu_partition, profile, state

P = profile("alpha", cpu_partition("cpu"))
LAST = state(
    P,
    accounts=("proj", "proj-gpu"),
    credit=(
        Credit(account="proj", used=12.0, balance=100.0),
        Credit(account="proj-gpu", balance=5.0),
    ),
    cpu={"pending_jobs": 7, "user_running_jobs": 3, "running_jobs": 9},
)


def test_a_read_probe_is_taken_as_it_is() -> None:
    now = state(P, accounts=(), cpu={"pending_jobs": 0})
    assert carry_forward(LAST, now) is now


def test_unread_accounts_keep_the_last_accounts_and_usage_but_take_new_balances() -> None:
    now = state(
        P, accounts=(), credit=(Credit(account="proj", balance=90.0),), unread=("accounts",)
    )
    got = carry_forward(LAST, now)
    assert got.accounts == ("proj", "proj-gpu")
    credit = {c.account: (c.used, c.balance) for c in got.credit}
    assert credit == {"proj": (12.0, 90.0), "proj-gpu": (None, 5.0)}
    assert got.unread == ("accounts",)  # still said: the site is not read whole


def test_unread_balances_keep_the_last_balances_and_their_accounts() -> None:
    now = state(
        P, accounts=("proj",), credit=(Credit(account="proj", used=13.0),), unread=("balance",)
    )
    got = carry_forward(LAST, now)
    assert got.accounts == ("proj", "proj-gpu")
    credit = {c.account: (c.used, c.balance) for c in got.credit}
    assert credit == {"proj": (13.0, 100.0), "proj-gpu": (None, 5.0)}


def test_an_unread_queue_keeps_the_last_counts_but_takes_the_new_capacity() -> None:
    now = state(P, cpu={"free_cpus": 1, "pending_jobs": 0}, unread=("queue",))
    cpu = carry_forward(LAST, now).partition("cpu")
    assert cpu is not None
    assert (cpu.pending_jobs, cpu.running_jobs, cpu.user_running_jobs) == (7, 9, 3)
    assert cpu.free_cpus == 1


def test_nothing_is_carried_from_an_offline_view_or_from_none() -> None:
    now = state(P, accounts=(), unread=("accounts",))
    down = SiteState(site="alpha", health=Health.OFFLINE, collected_at=NOW, error="x")
    assert carry_forward(down, now) is now
    assert carry_forward(None, now) is now
    twice = carry_forward(carry_forward(LAST, now), now)  # carried, then carried again
    assert twice.accounts == ("proj", "proj-gpu")
