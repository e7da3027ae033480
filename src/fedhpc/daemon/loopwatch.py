"""A diagnostic (FEDHPC_LOOP_WATCH_S > 0; off by default): a thread that notices each time the
daemon's event loop took longer than that to run a callback it was handed, which is how long a
REST request arriving then waited before anything read it, and logs the stall with where the
loop's thread was meanwhile (its stack sampled every 5 ms, fedhpc frames named).

Why a thread and not asyncio's debug mode (`slow_callback_duration`): debug mode records a
traceback for every callback it schedules, which slows the daemon it is measuring, and names
only the task that ran, not the line that kept the loop."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections import Counter, deque
from types import FrameType

import anyio
import structlog

__all__ = ["LoopWatch", "where"]

log = structlog.get_logger(__name__)

SAMPLE_S = 0.005
KEPT = 256  # stalls kept in `stalls` (the log has them all)


def where(frame: FrameType | None, *, depth: int = 4) -> str:
    """A stack as one line: the innermost frame, then the innermost `depth` fedhpc frames."""
    if frame is None:
        return "?"
    inner = f"{_name(frame)}"
    ours: list[str] = []
    f: FrameType | None = frame
    while f is not None and len(ours) < depth:
        if "/fedhpc/" in f.f_code.co_filename and f is not frame:
            ours.append(_name(f))
        f = f.f_back
    return " <- ".join([inner, *ours])


def _name(f: FrameType) -> str:
    module = f.f_globals.get("__name__", "?")
    return f"{module}:{f.f_code.co_name}:{f.f_lineno}"


class LoopWatch:
    """Stalls of one event loop longer than `threshold_s`: counted, and each one logged."""

    def __init__(self, threshold_s: float) -> None:
        self.threshold_s = threshold_s
        # (seconds, where the loop spent most), the newest KEPT
        self.stalls: deque[tuple[float, str]] = deque(maxlen=KEPT)
        self.watching = threading.Event()  # set when the thread has started watching
        self.sampled = threading.Event()  # set when it first asked the loop to answer
        self._stop = threading.Event()
        self.thread: threading.Thread | None = None

    async def run(self, stopping: anyio.Event) -> None:
        """Watch the running loop until `stopping` is set."""
        loop = asyncio.get_running_loop()
        self.thread = thread = threading.Thread(
            target=self._watch, args=(loop, threading.get_ident()), name="loopwatch", daemon=True
        )
        thread.start()
        try:
            await stopping.wait()
        finally:
            self._stop.set()
            # Shielded: cancelled, the thread is still stopped and joined (it ends within one
            # sample once the loop answers, or at once if the loop is gone).
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(thread.join)

    def _watch(self, loop: asyncio.AbstractEventLoop, ident: int) -> None:
        self.watching.set()
        while not self._stop.is_set():
            answered = threading.Event()
            started = time.monotonic()
            try:
                loop.call_soon_threadsafe(answered.set)
            except RuntimeError:  # the loop closed
                return
            self.sampled.set()
            if answered.wait(self.threshold_s):
                self._stop.wait(self.threshold_s / 2)
                continue
            seen: Counter[str] = Counter()
            while not answered.wait(SAMPLE_S) and not self._stop.is_set():
                seen[where(sys._current_frames().get(ident))] += 1
            if not answered.is_set():  # stopped while the loop was going away
                return
            took = time.monotonic() - started
            top = seen.most_common(3)
            self.stalls.append((took, top[0][0] if top else "?"))
            log.warning(
                "event loop stalled",
                ms=round(took * 1000, 1),
                samples=sum(seen.values()),
                where=[f"{n}x {w}" for w, n in top],
            )
