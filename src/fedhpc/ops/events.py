"""Reading the event log and acknowledging it: pull clients' cursors, never the bridge's."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from fedhpc.errors import UsageError

__all__ = [
    "INTERNAL_CONSUMERS",
    "AckRequest",
    "ArchiveRequest",
    "EventsQuery",
    "ReservedConsumer",
    "check_consumer",
]

# Cursors the daemon itself keeps (the resume bridge's is "bridge"); moving one from outside
# would skip events it has not routed yet, so those events would never wake anyone.
INTERNAL_CONSUMERS = frozenset({"bridge"})
_CONSUMER = r"^[A-Za-z0-9_.:-]+$"


class ReservedConsumer(UsageError):
    code = "reserved_consumer"
    default_hint = "Acknowledge under your own client's name, e.g. consumer='my-agent'."


def check_consumer(name: str) -> None:
    """Refuse a cursor that belongs to the daemon (any case; `fedhpc*` is kept for it too)."""
    low = name.lower()
    if low in INTERNAL_CONSUMERS or low.startswith("fedhpc"):
        raise ReservedConsumer(f"consumer {name!r} is fedhpc's own cursor")


class EventsQuery(BaseModel):
    """Query of GET /v1/events: after `after`, and after `consumer`'s acknowledged position."""

    model_config = ConfigDict(extra="forbid")

    after: int = Field(default=0, ge=0, le=2**62, description="the last event seq already seen")
    limit: int = Field(default=100, ge=1, le=1000)
    consumer: str | None = Field(default=None, min_length=1, max_length=100, pattern=_CONSUMER)
    wait_s: float = Field(
        default=0, ge=0, le=300, description="with nothing after `after`: wait this long for it"
    )


class ArchiveRequest(BaseModel):
    """POST /v1/events/archive: move delivered events older than `older_than_days` out of the
    store into <home>/archive/events-<time>.jsonl (`dry_run`: only count them)."""

    model_config = ConfigDict(extra="forbid")

    older_than_days: float = Field(ge=0, le=3650)
    dry_run: bool = False


class AckRequest(BaseModel):
    """POST /v1/events/ack: a pulling client's cursor moves to `through` (never backwards)."""

    model_config = ConfigDict(extra="forbid")

    consumer: str = Field(min_length=1, max_length=100, pattern=_CONSUMER)
    through: int = Field(ge=0, le=2**62)
