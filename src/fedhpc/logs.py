"""structlog to stderr, always: stdout belongs to the MCP protocol or to the CLI's answer.
Every logged exception carries its traceback; a warning or error that repeats is written once
per `REPEAT_S` with how often it came; the newest errors are kept for `fedhpc daemon status`."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any, TextIO

import structlog

from fedhpc.settings import LOG_LEVEL

__all__ = ["REPEAT_S", "Repeats", "configure_logging", "isolated", "recent_errors"]

REPEAT_S = 60.0  # one line per minute for a failure that repeats (with the count)
_KEPT = 50  # recent errors kept for `daemon status`
_ALERT = frozenset({"warning", "error", "critical", "exception"})
# Keys that change from one repeat of the same failure to the next: not part of its identity.
_VOLATILE = frozenset({"timestamp", "seconds", "elapsed_s", "took_s", "exc_info", "repeated"})

EventDict = MutableMapping[str, Any]


def _exc_summary(event: EventDict) -> str:
    """'Type: message' of the exception being logged, or ''."""
    exc = event.get("exc_info")
    if exc is True:
        exc = sys.exc_info()[1]
    elif isinstance(exc, tuple):
        exc = exc[1]
    if isinstance(exc, BaseException):
        return f"{type(exc).__name__}: {exc}"[:300]
    return ""


class Repeats:
    """A structlog processor: the first warning/error of a kind is written, its repeats within
    `window_s` are counted and dropped, and the next one after the window says `repeated=N`.
    A kind is the event with its fields (the volatile ones aside) and the exception's text.
    Also keeps the newest errors (`recent`), one entry per kind with its count."""

    def __init__(self, window_s: float = REPEAT_S, clock: Callable[[], float] = time.monotonic):
        self.window_s = window_s
        self.clock = clock
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[float, int]] = {}  # kind -> (last written, dropped since)
        self.recent: deque[dict[str, Any]] = deque(maxlen=_KEPT)

    def _kind(self, level: str, event: EventDict, exc: str) -> str:
        fields = sorted((k, str(v)[:200]) for k, v in event.items() if k not in _VOLATILE)
        return repr((level, fields, exc))

    def __call__(self, _logger: object, method: str, event: EventDict) -> EventDict:
        level = str(event.get("level", method)).lower()
        if level not in _ALERT:
            return event
        exc = _exc_summary(event)
        kind = self._kind(level, event, exc)
        now = self.clock()
        with self._lock:
            last = self._seen.get(kind)
            if last is not None and now - last[0] < self.window_s:
                self._seen[kind] = (last[0], last[1] + 1)
                self._remember(level, event, exc, kind)
                raise structlog.DropEvent
            self._seen[kind] = (now, 0)
            if len(self._seen) > 4 * _KEPT:  # forget kinds that have not come back
                for k, (at, _n) in list(self._seen.items()):
                    if now - at >= self.window_s:
                        del self._seen[k]
            self._remember(level, event, exc, kind)
        if last is not None and last[1]:
            event["repeated"] = last[1]  # dropped since it was last written
        return event

    def _remember(self, level: str, event: EventDict, exc: str, kind: str) -> None:
        if level not in {"error", "critical", "exception"}:
            return
        for entry in self.recent:
            if entry["kind"] == kind:
                self.recent.remove(entry)
                entry["count"] += 1
                entry["last_at"] = time.time()
                self.recent.append(entry)
                return
        context = {
            k: str(v)[:200]
            for k, v in event.items()
            if k not in _VOLATILE and k not in {"event", "level"}
        }
        self.recent.append(
            {
                "kind": kind,
                "event": str(event.get("event", ""))[:200],
                "error": exc,
                "context": context,
                "count": 1,
                "first_at": time.time(),
                "last_at": time.time(),
            }
        )


_repeats = Repeats()


def recent_errors() -> list[dict[str, Any]]:
    """The newest errors this process logged, newest last: event, error, context, count and
    when (first_at, last_at: Unix seconds)."""
    with _repeats._lock:
        return [{k: v for k, v in e.items() if k != "kind"} for e in _repeats.recent]


@contextmanager
def isolated(event: str, **ids: object) -> Iterator[None]:
    """One row's step in a loop over many (a task, an attempt, a group, a delivery): its
    exception is logged as `event` with `ids` and its traceback, and goes no further, so one
    bad row never stops the loop for the others. Cancellation is not an Exception: it passes."""
    try:
        yield
    except Exception:
        structlog.get_logger("fedhpc.loops").exception(event, **ids)


def configure_logging(level: str | None = None, *, stream: TextIO | None = None) -> None:
    """Key-value lines on stderr (or `stream`) at `level` (default `$FEDHPC_LOG_LEVEL` or
    WARNING); an exception's traceback goes in its line's `exception` field, as plain text."""
    name = (level or LOG_LEVEL.get() or "WARNING").upper()
    numeric = logging.getLevelNamesMapping().get(name, logging.WARNING)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            _repeats,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.KeyValueRenderer(key_order=["timestamp", "level", "event"]),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=stream or sys.stderr),
        cache_logger_on_first_use=False,
    )
