"""A per-site cap on scheduler commands per minute: a token bucket that makes a caller wait
for its turn (never refuses), so a sweep's commands are spread below the center's limits."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Awaitable, Callable

import anyio

__all__ = ["BURST_MAX", "CommandPace"]

# Slurm's rate limiter (rl_enable) allows a burst of 30 requests per user: ours stays below it.
BURST_MAX = 20
# A hair past the moment a command leaves the 60 s window (a clock that lands on it exactly
# would still count it in).
_EPSILON_S = 1e-3


class CommandPace:
    """`per_min` commands a minute sustained, bursts of at most `burst`; `acquire` waits.

    Tokens refill at `per_min / 60` a second up to `burst`, and no more than `per_min` go in
    any 60 s (the probes' `take` aside, which never waits). `clock` and `sleep` are seams for
    the benchmark's virtual time."""

    def __init__(
        self,
        per_min: int,
        *,
        burst: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        self.per_min = per_min
        self.burst = max(1, min(burst or BURST_MAX, per_min))
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(self.burst)
        self._at = clock()
        self._lock = anyio.Lock()
        self._bulk = anyio.Lock()  # bulk callers (submissions) queue here, one at a time
        self._sent: deque[float] = deque()  # send times within the last minute
        self.waited_s = 0.0  # total time callers were held back (for `fedhpc status`)
        self.peak = 0  # the most commands sent within any 60 s (`rate()` at each send)

    def _refill(self) -> None:
        now = self._clock()
        rate = self.per_min / 60.0
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * rate)
        self._at = now

    async def acquire(self, n: int = 1, *, urgent: bool = False) -> None:
        """Wait until `n` more commands (one remote call's) fit under the cap, then count them
        as sent. A call of more than a burst waits for a full burst and leaves the rest as a
        debt the next calls wait off: the cap holds over a minute, the call is never split.
        An `urgent` call (the daemon's look at its jobs, a cancel) waits behind at most one
        bulk call (a submission), never behind a sweep's whole backlog of them."""
        if urgent:
            await self._take(n)
            return
        async with self._bulk:
            await self._take(n)

    async def _take(self, n: int) -> None:
        async with self._lock:  # one waiter at a time: callers go in their order of arrival
            self._refill()
            need = float(min(n, self.burst))
            while self._tokens < need:
                wait = (need - self._tokens) * 60.0 / self.per_min
                before = self._clock()
                await self._sleep(wait)
                self.waited_s += wait
                self._refill()
                if self._tokens >= need:
                    break
                # It waited for exactly the missing fraction: a clock that moved a hair less
                # (rounding, a coarse clock) must not make it wait again for ever smaller bits.
                # A probe's commands taken meanwhile (`take`) are waited off, never forgiven.
                if need - self._tokens < 1e-6 or self._clock() - before < wait / 2:
                    self._tokens = need
                    break
            await self._window(n)
            self._count(n)

    async def _window(self, n: int) -> None:
        """Wait until `n` more commands fit in the last 60 s under `per_min`. The bucket alone
        lets a full burst and a whole minute's refill through in one minute (cap + burst, 80
        at the defaults); a center's "N a minute" means any minute."""
        need = min(n, self.per_min)
        while (over := self.rate() + need - self.per_min) > 0:
            # The over-th oldest command in the window must leave it first.
            wait = max(self._sent[over - 1] + 60.0 - self._clock(), 0.0) + _EPSILON_S
            await self._sleep(wait)
            self.waited_s += wait

    def _count(self, n: int) -> None:
        self._tokens -= float(n)
        now = self._clock()
        self._sent.extend([now] * n)
        self.peak = max(self.peak, self.rate())

    def take(self, n: int = 1) -> None:
        """Count `n` commands sent now without waiting their turn: the collector's probe, the
        daemon's own look at the site under its own deadline, never queues behind the work
        it watches (at a cap of a few a minute it would time out and take a healthy site
        offline). The debt is waited off by the commands after it, so the cap still holds
        over a minute, but for a probe that comes while another caller is already waiting:
        that caller's wait ends as computed, one command over."""
        self._refill()
        self._count(n)
        # A probe never waits, so its debt is bounded: at most a burst owed, else probes alone
        # could hold every other command back for ever at a cap of a few a minute.
        self._tokens = max(self._tokens, -float(self.burst))

    def rate(self) -> int:
        """Scheduler commands sent in the last 60 s."""
        cutoff = self._clock() - 60.0
        while self._sent and self._sent[0] <= cutoff:
            self._sent.popleft()
        return len(self._sent)
