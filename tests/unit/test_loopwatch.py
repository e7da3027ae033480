"""The loop-stall diagnostic (FEDHPC_LOOP_WATCH_S): a callback that keeps the event loop is
noticed, and the stall names the code that kept it."""

from __future__ import annotations

import time

import anyio

from fedhpc.daemon.loopwatch import KEPT, LoopWatch

CAP_S = 30  # a generous cap on waiting for the watcher's thread on a loaded machine


def _keeps_the_loop() -> None:
    time.sleep(0.3)  # synchronous work on the loop's thread, as a long placement batch would be


async def _started(watch: LoopWatch) -> None:
    """Until the watcher's thread is watching and has asked the loop to answer once."""
    assert await anyio.to_thread.run_sync(watch.watching.wait, CAP_S)
    assert await anyio.to_thread.run_sync(watch.sampled.wait, CAP_S)


async def test_a_stall_is_recorded_with_the_function_that_kept_the_loop() -> None:
    watch, stopping = LoopWatch(0.02), anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(watch.run, stopping)
        await _started(watch)
        _keeps_the_loop()
        stopping.set()  # run() joins the thread: the stall is recorded when it returns
    assert watch.stalls, "the 0.3 s block went unnoticed"
    assert any("_keeps_the_loop" in where for _, where in watch.stalls), list(watch.stalls)
    assert watch.thread is not None
    assert not watch.thread.is_alive()


async def test_cancelled_the_watch_stops_its_thread() -> None:
    watch = LoopWatch(0.02)
    async with anyio.create_task_group() as tg:
        tg.start_soon(watch.run, anyio.Event())  # never set: only cancellation ends it
        await _started(watch)
        tg.cancel_scope.cancel()
    assert watch.thread is not None
    assert not watch.thread.is_alive()


def test_the_stalls_kept_are_bounded() -> None:
    watch = LoopWatch(0.02)
    for n in range(KEPT + 10):
        watch.stalls.append((float(n), "here"))
    assert len(watch.stalls) == KEPT
    assert watch.stalls[0][0] == 10.0
