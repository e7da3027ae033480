"""Reading the user's jobs from a site's accounting holds a bounded amount however long the
user's history: the `sacct` answer is streamed and folded into the kept observations a read's
worth of lines at a time (issue 16). One remote call per read, whole window or not; a job in
two reads is kept once; a read that fails keeps nothing of what it read. The transport here
answers as `sacct` does, by the window asked (tests/integration/test_estimates_devfed.py reads
real Slurm)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime, timedelta
from itertools import islice
from typing import Any, cast

import pytest

from fedhpc.adapters.command import Command, CommandResult
from fedhpc.adapters.site import SiteAdapter
from fedhpc.adapters.transports.base import TransportError
from fedhpc.orchestrator import Orchestrator, estimates
from fedhpc.orchestrator.estimates import ACCOUNTING_EVERY_S, ACCOUNTING_OVERLAP_S
from fedhpc.placement import Policy, WaitObservation
from fedhpc.store import Store
from tests.unit.test_placement_world import NOW, cpu_partition, profile, site, state
from tests.unit.test_submit_accept import Clock, _orchestrator

BETA = site(profile("beta", cpu_partition("cpu")))
WINDOW = int(Policy().settings.learned_window_s)
CAP = Policy().settings.learned_max_samples


def _row(job: int, start: datetime, end: datetime | None, wait_s: int = 30) -> str:
    """One job of the user's as `sacct --parsable2 --allocations` writes it (epoch seconds)."""
    t, sub = int(start.timestamp()), int(start.timestamp()) - wait_s
    e = int(end.timestamp()) if end is not None else "Unknown"
    state = "COMPLETED" if end is not None else "RUNNING"
    return f"{job}|{state}|proj|cpu|{sub}|{sub}|{t}|{e}|60|0:0|cpu=4,node=1|analysis"


class Sacct:
    """`sacct` for the user's jobs: `jobs` are (id, start, end or None); a call gets those
    active in the window it asks for (ended after its start), made one line at a time. Streams
    them `batch` lines at a time (`run_lines`), or, asked by `run` (a transport that cannot
    stream), writes them all first. Keeps each call's window and the most lines it held."""

    name = "beta"

    def __init__(self, clock: Clock, jobs: list[tuple[int, datetime, datetime | None]]) -> None:
        self.clock, self.jobs = clock, jobs
        self.batch = 100
        self.windows: list[int] = []
        self.most_held = 0
        self.fail_after: int | None = None  # lines handed on before the connection drops

    def _rows(self, command: Command) -> Iterator[str]:
        assert command.argv[0] == "sacct", command.argv
        (since,) = (a for a in command.argv if a.startswith("--starttime=now-"))
        window = int(since.removeprefix("--starttime=now-").removesuffix("seconds"))
        self.windows.append(window)
        edge = self.clock.now - timedelta(seconds=window)
        return (_row(j, s, e) for j, s, e in self.jobs if e is None or e >= edge)

    async def run_lines(
        self, command: Command, on_lines: Callable[[list[str]], Awaitable[None]]
    ) -> CommandResult:
        rows, handed = self._rows(command), 0
        while chunk := list(islice(rows, self.batch)):
            self.most_held = max(self.most_held, len(chunk))
            await on_lines(chunk)
            handed += len(chunk)
            if self.fail_after is not None and handed >= self.fail_after:
                raise TransportError("ssh to beta failed: Connection reset by peer")
        return CommandResult(0, "", "")

    async def run(self, command: Command) -> CommandResult:
        text = "".join(r + "\n" for r in self._rows(command))
        self.most_held = max(self.most_held, text.count("\n"))
        return CommandResult(0, text, "")

    async def aclose(self) -> None:
        return None


def _setup(
    store: Store, jobs: list[tuple[int, datetime, datetime | None]]
) -> tuple[Orchestrator, Clock, Sacct]:
    clock = Clock()
    o = _orchestrator(store, clock, beta=BETA)
    o.collector.latest["beta"] = state(BETA.profile)
    sacct = Sacct(clock, jobs)
    o.adapters["beta"] = SiteAdapter(BETA, cast(Any, sacct))
    return o, clock, sacct


def _count_alive(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """[alive, most alive at once] of the observations the read path makes."""
    counts = [0, 0]

    class Counted(WaitObservation):
        def __init__(self, **data: Any) -> None:
            super().__init__(**data)
            counts[0] += 1
            counts[1] = max(counts[1], counts[0])

        def __del__(self) -> None:
            counts[0] -= 1

    monkeypatch.setattr(estimates, "WaitObservation", Counted)
    return counts


async def test_a_long_history_is_read_in_one_call_holding_one_batch_and_what_is_kept(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 20,000 of the user's jobs over 13 days: the read holds a batch of lines and the kept
    # observations, never the answer (the whole answer was once held at once: issue 16).
    jobs: list[tuple[int, datetime, datetime | None]] = [
        (i, NOW - timedelta(seconds=60 * i), NOW - timedelta(seconds=60 * i - 30))
        for i in range(1, 20_001)
    ]
    o, _, sacct = _setup(store, jobs)
    alive = _count_alive(monkeypatch)
    kept = await o.waits.learn_from_accounting(force=True)
    assert sacct.windows == [WINDOW]  # the whole window, in one call
    assert o.adapters["beta"].calls["user_jobs"] == 1
    assert sacct.most_held == sacct.batch  # streamed, never written whole
    assert kept == CAP  # one partition, one size: the newest CAP
    assert alive[1] <= CAP + 2  # those, the one being judged and the one it displaced
    newest = o.waits.user_waits["beta"]
    assert [w.job for w in newest] == [str(i) for i in range(1, CAP + 1)]


async def test_a_job_in_two_reads_is_kept_once_and_a_later_read_is_one_short_call(
    store: Store,
) -> None:
    running = (1, NOW - timedelta(hours=1), None)  # active in both reads' windows
    ended = (2, NOW - timedelta(minutes=10), NOW - timedelta(seconds=30))  # in the overlap
    o, clock, sacct = _setup(
        store, [running, ended, (3, NOW - timedelta(days=2), NOW - timedelta(days=2))]
    )
    assert await o.waits.learn_from_accounting(force=True) == 3
    clock.now = NOW + timedelta(seconds=ACCOUNTING_EVERY_S)
    sacct.jobs.append((4, clock.now - timedelta(seconds=20), None))
    assert await o.waits.learn_from_accounting(force=True) == 4
    assert sacct.windows == [WINDOW, int(ACCOUNTING_EVERY_S) + ACCOUNTING_OVERLAP_S]
    assert o.adapters["beta"].calls["user_jobs"] == 2  # one call per read
    # Jobs 1 and 2 came back in the second read (still running; ended in the overlap).
    assert sorted(w.job for w in o.waits.user_waits["beta"]) == ["1", "2", "3", "4"]


async def test_a_read_that_breaks_keeps_nothing_of_it_and_the_next_asks_again(
    store: Store,
) -> None:
    o, clock, sacct = _setup(store, [(i, NOW - timedelta(hours=i), NOW) for i in range(1, 6)])
    # A first read that breaks after 2 of 5 rows: nothing kept, the next asks the whole window.
    sacct.batch, sacct.fail_after = 1, 2
    assert await o.waits.learn_from_accounting(force=True) == 0
    assert "beta" not in o.waits.user_waits
    sacct.fail_after = None
    assert await o.waits.learn_from_accounting(force=True) == 5
    assert sacct.windows == [WINDOW, WINDOW]
    good = list(o.waits.user_waits["beta"])
    # A later read that breaks after one new row: the last good read's observations stand,
    # and the read after it asks again from the last good read (the broken one's span too).
    clock.now = NOW + timedelta(seconds=ACCOUNTING_EVERY_S)
    sacct.jobs += [(6, clock.now - timedelta(seconds=5), None), (7, clock.now, None)]
    sacct.fail_after = 1
    assert await o.waits.learn_from_accounting(force=True) == 5
    assert o.waits.user_waits["beta"] == good
    clock.now += timedelta(seconds=ACCOUNTING_EVERY_S)
    sacct.fail_after = None
    assert await o.waits.learn_from_accounting(force=True) == 7
    assert sacct.windows[-1] == 2 * int(ACCOUNTING_EVERY_S) + ACCOUNTING_OVERLAP_S
    assert o.adapters["beta"].calls["user_jobs"] == 4


async def test_a_failed_sacct_keeps_none_of_the_rows_it_wrote(store: Store) -> None:
    o, _, sacct = _setup(store, [(1, NOW - timedelta(hours=1), NOW)])

    async def failed(
        command: Command, on_lines: Callable[[list[str]], Awaitable[None]]
    ) -> CommandResult:
        await on_lines([_row(1, NOW - timedelta(hours=1), NOW)])
        return CommandResult(1, "", "sacct: error: Problem talking to the database\n")

    sacct.run_lines = failed  # type: ignore[method-assign]
    assert await o.waits.learn_from_accounting(force=True) == 0
    assert "beta" not in o.waits.user_waits


async def test_a_transport_that_cannot_stream_hands_the_answer_on_in_batches() -> None:
    # Globus Compute: the answer comes back whole; it is still folded a batch at a time.
    class Whole:
        async def run(self, command: Command) -> CommandResult:
            return CommandResult(0, "".join(f"{i}\n" for i in range(2_500)) + "last", "")

        async def aclose(self) -> None:
            return None

    got: list[list[str]] = []

    async def on_lines(lines: list[str]) -> None:
        got.append(lines)

    adapter = SiteAdapter(BETA, cast(Any, Whole()))
    result = await adapter.read_lines(Command(("sacct",)), "user_jobs", on_lines)
    assert result.ok and result.stdout == ""
    assert [len(b) for b in got] == [1_000, 1_000, 501]
    assert got[-1][-1] == "last" and adapter.calls["user_jobs"] == 1
