"""How the event loop learns that a child process ended.

On Python 3.11 asyncio waits for each child with a thread of its own (`ThreadedChildWatcher`),
and starting that thread makes the event loop wait until the new thread has run: on a busy
machine (a sweep: four clusters and thousands of jobs on two CPUs) that held the daemon's loop
for tens of milliseconds per `sbatch` or `squeue`, and a REST request arriving then waited as
long (benchmarks/spawn_lag.py measures it). A pidfd (Linux >= 5.3) lets the loop itself see
the child end, with no thread. Python 3.12 does this by default."""

from __future__ import annotations

import asyncio
import os
import sys
import warnings

__all__ = ["watch_children_by_pidfd"]


def watch_children_by_pidfd() -> bool:
    """Have asyncio watch the running loop's child processes through pidfds where it does not
    already (3.11 on Linux; the watcher is bound to this loop, so call it from the loop that
    runs the commands). Returns whether it does now; where pidfds are missing, the default
    stays."""
    if sys.version_info >= (3, 12):
        return True  # the default there where pidfds work; nothing to set
    if not hasattr(os, "pidfd_open"):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:  # a kernel older than 5.3, or a sandbox that refuses it
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        watcher = asyncio.PidfdChildWatcher()
        watcher.attach_loop(asyncio.get_running_loop())
        asyncio.set_child_watcher(watcher)
    return True
