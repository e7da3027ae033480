"""No thread waits for a command's child (3.11 on Linux): the transports see it end through a
pidfd of their own (transports/process.py), and asyncio's own subprocesses can be watched the
same way (transports/children.py); every exit status is still seen."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Awaitable, Callable

import anyio
import pytest

from fedhpc.adapters.transports.children import children_watched_by_pidfd
from fedhpc.adapters.transports.local import run_bounded

pytestmark = pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12 watches by pidfd")


async def _transport_exit(i: int) -> int:
    out = await run_bounded(
        ["sh", "-c", f"sleep 0.2; exit {i}"], stdin=None, env=None, timeout_s=10
    )
    return out.returncode


async def _asyncio_exit(i: int) -> int:
    async with await anyio.open_process(["sh", "-c", f"sleep 0.2; exit {i}"]) as process:
        return await process.wait()


async def _waiter_threads_while_running(
    n: int, run: Callable[[int], Awaitable[int]]
) -> tuple[list[int], set[str]]:
    """Run `n` commands at once (exit status i each); the names of the threads seen meanwhile."""
    seen: set[str] = set()
    codes: list[int] = [0] * n
    done = anyio.Event()

    async def one(i: int) -> None:
        codes[i] = await run(i)

    async def look() -> None:
        while not done.is_set():
            seen.update(t.name for t in threading.enumerate())
            await anyio.sleep(0.01)

    async with anyio.create_task_group() as tg:
        tg.start_soon(look)
        async with anyio.create_task_group() as cmds:
            for i in range(n):
                cmds.start_soon(one, i)
        done.set()
    return codes, seen


async def test_no_thread_waits_for_a_transports_command_and_every_exit_is_seen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # asyncio's default watcher is left as it is: the transports do not use it. Each child is
    # watched through a pidfd of its own (without one a worker thread would wait, and its name
    # is no waitpid thread's: counted here, or the check below could not fail).
    opened: list[int] = []
    real = os.pidfd_open

    def counted(pid: int, flags: int = 0) -> int:
        fd = real(pid, flags)
        opened.append(pid)
        return fd

    monkeypatch.setattr(os, "pidfd_open", counted)
    codes, seen = await _waiter_threads_while_running(8, _transport_exit)
    assert codes == list(range(8))
    assert len(opened) == 8
    assert not [name for name in seen if "waitpid" in name], seen


async def test_asyncios_default_starts_a_thread_per_subprocess() -> None:
    # What children_watched_by_pidfd is for: without it, each asyncio child has a waitpid thread.
    _, seen = await _waiter_threads_while_running(5, _asyncio_exit)
    assert any("waitpid" in name for name in seen), seen


async def test_with_pidfds_no_thread_waits_for_an_asyncio_subprocess() -> None:
    with children_watched_by_pidfd() as used:
        assert used
        codes, seen = await _waiter_threads_while_running(8, _asyncio_exit)
        assert codes == list(range(8))
        assert not [name for name in seen if "waitpid" in name], seen
    # Afterwards asyncio's default is back (a watcher bound to this loop would fail any
    # other loop of the process once this one closed).
    codes, seen = await _waiter_threads_while_running(2, _asyncio_exit)
    assert codes == [0, 1]
    assert any("waitpid" in name for name in seen), seen
