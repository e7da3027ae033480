"""A child process made off the event loop and driven from it through its file descriptors.

asyncio makes each child with `subprocess.Popen` on the loop's own thread. Forking and execing
wait for a CPU like anything else, so on a busy machine (a sweep: four clusters and thousands of
jobs on two CPUs) the daemon's loop, and every REST request with it, waited hundreds of ms for
one `sbatch` or `squeue` to start (the loop watch saw it in `subprocess:_execute_child`). Here
Popen runs on a worker thread (its fork and exec release the GIL), and the loop then reads and
writes the child's pipes as non-blocking fds and sees it end through a pidfd (Linux >= 5.3): no
thread waits for a child. Where pidfds are missing, a worker thread waits instead.
benchmarks/spawn_lag.py measures the loop's lateness both ways."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from contextlib import suppress
from types import TracebackType

import anyio
from anyio.abc import ByteReceiveStream

__all__ = ["Child", "spawn"]

_CHUNK = 65536


class _PipeReader(ByteReceiveStream):
    """One of the child's output pipes, read from the loop as it becomes readable."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    async def receive(self, max_bytes: int = _CHUNK) -> bytes:
        while True:
            await anyio.wait_readable(self._fd)
            try:
                chunk = os.read(self._fd, max_bytes)
            except BlockingIOError:  # woken, but another read got there first
                continue
            if not chunk:
                raise anyio.EndOfStream
            return chunk

    async def aclose(self) -> None:
        return None  # the Child closes its fds, once, when it is done


class Child:
    """One child process in its own session (so its whole group can be killed), with its stdout
    and stderr as byte streams. `aclose` kills the group if the child is still running, reaps
    it and closes every fd, also when cancelled; use it as an async context manager."""

    def __init__(self, process: subprocess.Popen[bytes], pidfd: int | None) -> None:
        self._process = process
        self._pidfd = pidfd
        assert process.stdout is not None
        assert process.stderr is not None
        self.stdout: ByteReceiveStream = _PipeReader(process.stdout.fileno())
        self.stderr: ByteReceiveStream = _PipeReader(process.stderr.fileno())

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        """The exit status once the child was reaped (-N: killed by signal N), else None."""
        return self._process.returncode

    async def feed(self, data: bytes) -> None:
        """Write `data` to the child's stdin, then close it so the child sees its end."""
        pipe = self._process.stdin
        assert pipe is not None, "spawned without stdin"
        fd = pipe.fileno()
        view = memoryview(data)
        try:
            while view:
                await anyio.wait_writable(fd)
                try:
                    view = view[os.write(fd, view[:_CHUNK]) :]
                except BlockingIOError:
                    continue
        except BrokenPipeError:
            pass  # the child exited without reading its stdin: its business, not an error
        finally:
            pipe.close()

    async def wait(self) -> int:
        """Until the child has ended; reaps it and returns its exit status."""
        if self._pidfd is None:
            # Abandoned when cancelled: `aclose` kills the child, and this thread then ends.
            return await anyio.to_thread.run_sync(
                self._process.wait, abandon_on_cancel=True, limiter=anyio.CapacityLimiter(1)
            )
        while (code := self._process.poll()) is None:
            await anyio.wait_readable(self._pidfd)
        return code

    def kill_group(self) -> None:
        """SIGKILL the child's whole process group, grandchildren included (not once reaped:
        its pid may belong to another process by then)."""
        if self._process.returncode is None:
            _kill_group(self._process.pid)

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            try:
                if self._process.returncode is None:
                    self.kill_group()
                    await self.wait()
            finally:
                for pipe in (self._process.stdin, self._process.stdout, self._process.stderr):
                    if pipe is not None:
                        pipe.close()
                if self._pidfd is not None:
                    os.close(self._pidfd)
                    self._pidfd = None

    async def __aenter__(self) -> Child:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def _kill_group(pid: int) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _popen(argv: list[str], feed: bool, env: dict[str, str] | None) -> Child:
    process = subprocess.Popen(  # argv as given, never through a shell
        argv,
        stdin=subprocess.PIPE if feed else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,  # its own process group, so a kill reaches grandchildren too
        bufsize=0,
    )
    try:
        for pipe in (process.stdin, process.stdout, process.stderr):
            if pipe is not None:
                os.set_blocking(pipe.fileno(), False)
        try:
            pidfd: int | None = os.pidfd_open(process.pid)
        except (AttributeError, OSError):  # not Linux, a kernel older than 5.3, or a sandbox
            pidfd = None
    except BaseException:  # nothing else will ever hold this child: end it here
        with process:  # closes its pipes and reaps it
            _kill_group(process.pid)
        raise
    return Child(process, pidfd)


async def spawn(argv: Sequence[str], *, feed: bool, env: Mapping[str, str] | None) -> Child:
    """Start argv (never through a shell) on a worker thread, with stdin a pipe when `feed`,
    else /dev/null. Not abandoned when cancelled: the child is then killed and reaped before
    the cancellation goes on. Raises what Popen raises (FileNotFoundError for a missing
    program, PermissionError, OSError)."""
    # No checkpoint between the thread's return and the caller's, so a cancellation that came
    # while the thread ran is delivered only once the caller holds the Child and will close it.
    return await anyio.to_thread.run_sync(
        _popen, list(argv), feed, dict(env) if env is not None else None
    )
