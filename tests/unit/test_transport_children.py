"""Child processes watched through pidfds (3.11 on Linux): no thread per command, and every
exit status, timeout and kill is still seen."""

from __future__ import annotations

import sys
import threading

import anyio
import pytest

from fedhpc.adapters.transports.children import children_watched_by_pidfd
from fedhpc.adapters.transports.local import TransportTimeout, run_bounded

pytestmark = pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12 watches by pidfd")


async def _waiter_threads_while_running(n: int) -> tuple[list[int], set[str]]:
    """Run `n` commands at once (exit status i each); the names of the threads seen meanwhile."""
    seen: set[str] = set()
    codes: list[int] = [0] * n
    done = anyio.Event()

    async def one(i: int) -> None:
        out = await run_bounded(
            ["sh", "-c", f"sleep 0.2; exit {i}"], stdin=None, env=None, timeout_s=10
        )
        codes[i] = out.returncode

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


async def test_asyncios_default_starts_a_thread_per_command() -> None:
    # What the change is for: without it, each child has a waitpid thread.
    _, seen = await _waiter_threads_while_running(5)
    assert any("waitpid" in name for name in seen), seen


async def test_with_pidfds_no_thread_waits_for_a_command_and_every_exit_is_seen() -> None:
    with children_watched_by_pidfd() as used:
        assert used
        codes, seen = await _waiter_threads_while_running(8)
        assert codes == list(range(8))
        assert not [name for name in seen if "waitpid" in name], seen
        # A timeout still kills the command's group and is reported as one.
        with pytest.raises(TransportTimeout):
            await run_bounded(["sleep", "30"], stdin=None, env=None, timeout_s=0.3)
    # Afterwards asyncio's default is back (a watcher bound to this loop would fail any
    # other loop of the process once this one closed).
    codes, seen = await _waiter_threads_while_running(2)
    assert codes == [0, 1] and any("waitpid" in name for name in seen), seen
