"""The daemon gives freed heap back to the system each cycle (glibc's malloc_trim)."""

from __future__ import annotations

import ctypes.util
import platform

import anyio
import pytest

from fedhpc.daemon import memory


def _glibc() -> bool:
    return platform.libc_ver()[0] == "glibc" and ctypes.util.find_library("c") is not None


def _rss_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise LookupError("no VmRSS")


@pytest.mark.skipif(not _glibc(), reason="malloc_trim is glibc's")
def test_freed_small_objects_are_returned_to_the_system() -> None:
    """Small objects freed out of order leave glibc's heap full of free pages, which stay
    resident until they are trimmed: what a sweep's transient rows did to the daemon."""
    held = [bytes(1000) for _ in range(70_000)]  # about 70 MB in blocks malloc serves
    keep = held[::500]  # a few survivors pin the heap's top: no automatic trim
    del held
    before = _rss_kb()
    assert memory.release_free_memory() is True
    after = _rss_kb()
    assert before - after > 20_000, (before, after)
    assert keep


async def test_trim_each_cycle_returns_when_the_daemon_stops() -> None:
    stopping = anyio.Event()
    stopping.set()
    with anyio.fail_after(5):
        await memory.trim_each_cycle(0.01, stopping)
