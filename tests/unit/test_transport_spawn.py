"""Children made off the event loop (transports/process.py): the loop runs while Popen forks and
execs, a cancellation then still kills and reaps the child, and where pidfds are missing a worker
thread sees every exit, timeout and kill instead."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from fedhpc.adapters.command import Command
from fedhpc.adapters.transports.local import LocalTransport, TransportTimeout, run_bounded
from tests.unit.test_transport_local import _alive

_real_popen = subprocess.Popen


class HeldPopen:
    """A `subprocess.Popen` that, once entered, waits until `release` is set before making the
    child: whoever sets it ran while Popen was in progress."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.released_in_time = False
        self.made: list[subprocess.Popen[bytes]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        self.entered.set()
        self.released_in_time = self.release.wait(timeout=3)
        process: subprocess.Popen[bytes] = _real_popen(*args, **kwargs)
        self.made.append(process)
        return process

    async def until_entered(self) -> None:
        while not self.entered.is_set():
            await anyio.sleep(0.005)


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> HeldPopen:
    popen = HeldPopen()
    monkeypatch.setattr(subprocess, "Popen", popen)
    return popen


async def test_the_loop_runs_while_a_child_is_being_created(held: HeldPopen) -> None:
    # asyncio's own subprocesses call Popen on the loop's thread: the loop could not run the
    # task that releases it, and Popen would give up waiting (released_in_time False).
    async def release_once_entered() -> None:
        await held.until_entered()
        held.release.set()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(release_once_entered)
            out = await run_bounded(["sh", "-c", "exit 3"], stdin=None, env=None, timeout_s=10)
    assert held.released_in_time
    assert out.returncode == 3


async def test_a_command_cancelled_while_its_child_is_created_still_kills_and_reaps_it(
    held: HeldPopen,
) -> None:
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(partial(run_bounded, ["sleep", "30"], stdin=None, env=None, timeout_s=30))
            await held.until_entered()
            tg.cancel_scope.cancel()
            held.release.set()
    (child,) = held.made
    assert child.returncode == -signal.SIGKILL  # killed, and reaped: not left to run or linger
    assert child.stdout is not None
    assert child.stdout.closed


@pytest.fixture
def no_pidfd(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    refused: list[int] = []

    def refuse(pid: int, flags: int = 0) -> int:
        refused.append(pid)
        raise OSError(errno.ENOSYS, "pidfd_open is not implemented")

    monkeypatch.setattr(os, "pidfd_open", refuse)
    yield
    assert refused, "no child was made through the fallback"


@pytest.mark.usefixtures("no_pidfd")
async def test_without_pidfds_every_exit_status_is_still_seen() -> None:
    codes: dict[int, int] = {}

    async def one(i: int) -> None:
        cmd = Command(("sh", "-c", f"cat > /dev/null; echo {i}; exit {i}"), stdin="x" * 100_000)
        result = await LocalTransport().run(cmd)
        assert result.stdout == f"{i}\n"
        codes[i] = result.returncode

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            for i in range(6):
                tg.start_soon(one, i)
    assert codes == {i: i for i in range(6)}


@pytest.mark.usefixtures("no_pidfd")
async def test_without_pidfds_a_timeout_and_a_cancellation_still_kill_the_group(
    tmp_path: Path,
) -> None:
    pids = tmp_path / "pids"
    script = f'sleep 60 & echo "$$ $!" > {pids}; wait'
    # 3 s: time for sh to start and write its pids on a loaded machine, then the timeout.
    with anyio.fail_after(20), pytest.raises(TransportTimeout):
        await run_bounded(["sh", "-c", script], stdin=None, env=None, timeout_s=3)
    first = [int(p) for p in pids.read_text().split()]
    pids.unlink()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                partial(run_bounded, ["sh", "-c", script], stdin=None, env=None, timeout_s=30)
            )
            while not pids.exists() or len(pids.read_text().split()) < 2:
                await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
        second = [int(p) for p in pids.read_text().split()]
        while any(_alive(pid) for pid in first + second):  # SIGKILL sent; nothing says it landed
            await anyio.sleep(0.01)
