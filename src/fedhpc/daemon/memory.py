"""Giving freed heap back to the system, once per control cycle.

CPython frees a sweep's transient objects (rows, records, placement traces), but glibc keeps
the pages in its heaps: in the main arena below the top and in the arenas of the worker threads
(placement, SQLite), which the daemon starts and stops as it goes. Measured on a process-site
sweep, the daemon's resident size then only ratchets up, a little per cycle, although its Python
heap does not grow. `malloc_trim(0)` returns the free pages of every arena; on a libc without it
(musl, macOS) nothing is done.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache

import anyio

__all__ = ["release_free_memory", "trim_each_cycle"]


@cache
def _malloc_trim() -> ctypes._NamedFuncPointer | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        fn = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return fn


def release_free_memory() -> bool:
    """Return free heap pages to the system; whether this libc can (glibc: malloc_trim)."""
    fn = _malloc_trim()
    if fn is None:
        return False
    fn(0)
    return True


async def trim_each_cycle(cycle_s: float, stopping: anyio.Event) -> None:
    """Release free memory every `cycle_s` until `stopping`."""
    if _malloc_trim() is None:
        return
    while not stopping.is_set():
        with anyio.move_on_after(cycle_s):
            await stopping.wait()
        # In a worker thread (ctypes lets go of the GIL): a trim that finds pages to return
        # takes some milliseconds, which the event loop does not wait for.
        await anyio.to_thread.run_sync(release_free_memory)
