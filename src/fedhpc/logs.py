"""structlog to stderr, always: stdout belongs to the MCP protocol or to the CLI's answer."""

from __future__ import annotations

import logging
import sys

import structlog

from fedhpc.settings import LOG_LEVEL

__all__ = ["configure_logging"]


def configure_logging(level: str | None = None) -> None:
    """Key-value lines on stderr at `level` (default `$FEDHPC_LOG_LEVEL` or WARNING)."""
    name = (level or LOG_LEVEL.get() or "WARNING").upper()
    numeric = logging.getLevelNamesMapping().get(name, logging.WARNING)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.KeyValueRenderer(key_order=["timestamp", "level", "event"]),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
