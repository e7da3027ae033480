"""Request limits of the REST face: a capped body reader and CPU-heavy work off the event loop.

The daemon is one event loop every agent session shares; a handler that computes for a second
stalls placement, orchestration and every resume for that second. Pure, CPU-bound work (drafting
an envelope) runs in a worker thread under a time bound instead."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import anyio
from starlette.requests import Request

from fedhpc.errors import OverBudget, TooLarge, UsageError

__all__ = [
    "BODY_TIMEOUT_S",
    "DRAFT_BUDGET_S",
    "MAX_BODY_BYTES",
    "BodyTimeout",
    "read_body",
    "run_bounded",
]

MAX_BODY_BYTES = 1_000_000  # documented in docs/errors.md
BODY_TIMEOUT_S = 30.0  # a whole body, however slowly sent (1 MB takes milliseconds on the socket)
DRAFT_BUDGET_S = 5.0  # the drafter takes milliseconds at its input limits; this is a backstop

T = TypeVar("T")

# At most two CPU-bound requests at once: a flood waits here, not in the event loop.
_CPU = anyio.CapacityLimiter(2)


class BodyTimeout(UsageError):
    """A request whose body did not arrive whole in time: answered, then the connection closes."""

    code = "body_timeout"
    default_hint = "Send the whole body at once (fedhpc's own clients do)."


async def read_body(request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The request body, refused with `TooLarge` as soon as it passes `limit` (a declared
    Content-Length over it is refused before reading), and with `BodyTimeout` when it has not
    come whole within `BODY_TIMEOUT_S`."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise TooLarge(f"request body of {int(declared)} bytes; at most {limit}")
    chunks: list[bytes] = []
    size = 0
    try:
        with anyio.fail_after(BODY_TIMEOUT_S):  # a half-sent body would hold its request forever
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise TooLarge(f"request body over {limit} bytes")
                chunks.append(chunk)
    except TimeoutError:
        raise BodyTimeout(
            f"request body not received whole within {BODY_TIMEOUT_S:g} s ({size} bytes came)"
        ) from None
    return b"".join(chunks) or b"{}"


async def run_bounded(fn: Callable[[], T], *, budget_s: float, what: str) -> T:
    """`fn()` in a worker thread; past `budget_s` the caller gets `OverBudget` at once (the
    thread, which cannot be interrupted, finishes in the background and its answer is dropped)."""
    try:
        with anyio.fail_after(budget_s):
            return await anyio.to_thread.run_sync(fn, abandon_on_cancel=True, limiter=_CPU)
    except TimeoutError:
        raise OverBudget(f"{what} took longer than {budget_s:g} s and was abandoned") from None
