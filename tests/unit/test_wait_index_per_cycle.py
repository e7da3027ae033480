"""The learned wait estimator's index is built once per control cycle, not once per decision,
and a cycle's finished attempts reach the next decisions."""

from __future__ import annotations

import threading
from collections.abc import Awaitable
from datetime import UTC, datetime
from typing import Any, cast

import anyio
import pytest

from fedhpc.domain.job import Shape
from fedhpc.orchestrator.service import Orchestrator
from fedhpc.placement import Settings, WaitHistory, WaitObservation
from fedhpc.placement.errors import EstimatorErrors
from fedhpc.store import Store
from tests.unit.attempts import put_completed

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


async def test_one_index_per_cycle_shared_by_its_decisions(store: Store) -> None:
    o = Orchestrator(store, cast(Any, None), {}, clock=lambda: NOW)
    assert await o.waits.history() is None  # nothing finished yet: no learned estimates
    for n in range(3):
        await put_completed(store, n + 1, now=NOW, wait_s=60.0 * (n + 1))
    # Same cycle: the decisions share the index built at its first use (empty then).
    assert await o.waits.history() is None
    assert o.waits.index_builds == 1
    o.waits.new_cycle()
    first = await o.waits.history()
    assert first is not None
    assert await o.waits.history() is first
    assert o.waits.index_builds == 2
    est = first.estimate("s", "gpu", Shape(gpus=1))
    assert est is not None and est.wait_s == 120.0 and est.source.endswith("(n=3)")


def test_estimate_answers_are_stable_when_asked_again() -> None:
    """The per-shape answer cache never changes an answer (same object the second time)."""
    obs = [
        WaitObservation(site="s", partition="g", gpus=g, wait_s=w, observed_at=NOW)
        for g, w in ((1, 10.0), (1, 20.0), (1, 30.0), (4, 600.0), (4, 700.0), (4, 800.0))
    ]
    hist = WaitHistory(obs, now=NOW, settings=Settings())
    one, two = hist.estimate("s", "g", Shape(gpus=2)), hist.estimate("s", "g", Shape(gpus=2))
    assert one is two and one is not None and one.source == "learned:partition (n=3)"
    assert hist.estimate("s", "g", Shape(gpus=1)) is not None
    assert hist.estimate("s", "g", Shape(gpus=8)) is None


async def test_decisions_asking_at_once_share_one_build_made_off_the_loop(store: Store) -> None:
    """The index is built on a worker thread (the loop stays free for REST), once however many
    decisions ask meanwhile; a cycle ending during a build leaves that build uncached."""
    o = Orchestrator(store, cast(Any, None), {}, clock=lambda: NOW)
    for n in range(3):
        await put_completed(store, n + 1, now=NOW, wait_s=60.0)
    threads: list[int] = []
    real = WaitHistory.__init__

    def spy(self: WaitHistory, *args: Any, **kwargs: Any) -> None:
        threads.append(threading.get_ident())
        real(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(WaitHistory, "__init__", spy)
        got: list[WaitHistory | None] = []
        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(lambda: _append(got, o.waits.history()))
        assert len(got) == 5 and got[0] is not None and all(h is got[0] for h in got)
        assert o.waits.index_builds == 1
        assert threads and threading.get_ident() not in threads

        # A cycle ends while the next build runs: that build answers its caller, is not kept.
        o.waits.new_cycle()
        started, release = threading.Event(), threading.Event()

        def slow(self: WaitHistory, *args: Any, **kwargs: Any) -> None:
            started.set()
            release.wait(10)
            real(self, *args, **kwargs)

        mp.setattr(WaitHistory, "__init__", slow)
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: _append(got, o.waits.history()))
            await anyio.to_thread.run_sync(started.wait, 10)
            o.waits.new_cycle()
            release.set()
        mp.setattr(WaitHistory, "__init__", real)
        assert got[-1] is not None
        assert await o.waits.history() is not got[-1]  # built again for the new cycle
        assert o.waits.index_builds == 3

        # The estimators' errors too: built on a worker thread, once per cycle.
        real_errors = EstimatorErrors.__init__
        errors_threads: list[int] = []

        def spy_errors(self: EstimatorErrors, *args: Any, **kwargs: Any) -> None:
            errors_threads.append(threading.get_ident())
            real_errors(self, *args, **kwargs)

        mp.setattr(EstimatorErrors, "__init__", spy_errors)
        first_errors = await o.waits.errors()
        assert await o.waits.errors() is first_errors
        assert len(errors_threads) == 1 and errors_threads[0] != threading.get_ident()


async def _append(out: list[WaitHistory | None], pending: Awaitable[WaitHistory | None]) -> None:
    out.append(await pending)
