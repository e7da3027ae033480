"""The loop-stall diagnostic (FEDHPC_LOOP_WATCH_S): a callback that keeps the event loop is
noticed, and the stall names the code that kept it."""

from __future__ import annotations

import time

import anyio

from fedhpc.daemon.loopwatch import LoopWatch


def _keeps_the_loop() -> None:
    time.sleep(0.3)  # synchronous work on the loop's thread, as a long placement batch would be


async def test_a_stall_is_recorded_with_the_function_that_kept_the_loop() -> None:
    watch, stopping = LoopWatch(0.02), anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(watch.run, stopping)
        await anyio.sleep(0.1)  # the watcher's thread is up
        _keeps_the_loop()
        await anyio.sleep(0.1)
        stopping.set()
    assert watch.stalls, "the 0.3 s block went unnoticed"
    took, where = max(watch.stalls)
    assert took >= 0.02
    assert "_keeps_the_loop" in where
