"""How the event loop learns that a child process ended.

On Python 3.11 asyncio waits for each child with a thread of its own (`ThreadedChildWatcher`),
and starting that thread makes the event loop wait until the new thread has run: on a busy
machine (a sweep: four clusters and thousands of jobs on two CPUs) that held the daemon's loop
for tens of milliseconds per `sbatch` or `squeue`, and a REST request arriving then waited as
long (benchmarks/spawn_lag.py measures it). A pidfd (Linux >= 5.3) lets the loop itself see
the child end, with no thread. Python 3.12 does this by default.

fedhpc's transports no longer use asyncio's subprocesses (transports/process.py makes each child
off the loop and watches it by a pidfd of its own), so this now matters only for an asyncio
subprocess something else starts on the daemon's loop."""

from __future__ import annotations

import asyncio
import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["children_watched_by_pidfd"]


@contextmanager
def children_watched_by_pidfd() -> Iterator[bool]:
    """Within it, asyncio watches the running loop's child processes through pidfds where it
    does not already (3.11 on Linux). A 3.11 watcher is bound to one loop, so this is entered
    on the loop that runs the commands, and asyncio's default is back on exit (another loop
    in the same process would otherwise find a watcher bound to a closed loop). Yields
    whether pidfds are used; where they are missing, the default stays."""
    if sys.version_info >= (3, 12):
        yield True  # the default there where pidfds work; nothing to set
        return
    if not hasattr(os, "pidfd_open") or not _pidfds_work():
        yield False
        return
    watcher = asyncio.PidfdChildWatcher()
    watcher.attach_loop(asyncio.get_running_loop())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        before = asyncio.get_child_watcher()  # the default (a thread per child) if none yet
        asyncio.set_child_watcher(watcher)
    try:
        yield True
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            asyncio.set_child_watcher(before)  # closes ours


def _pidfds_work() -> bool:
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:  # a kernel older than 5.3, or a sandbox that refuses it
        return False
    return True
