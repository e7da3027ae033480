"""The pull clients' tools: a page of the event log (`list_events`) and the acknowledgement
that lets old events be archived (`ack_events`)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from fedhpc.mcp_server.calls import Ctx, daemon_link
from fedhpc.mcp_server.results import guarded
from fedhpc.ops.events import check_consumer

__all__ = ["AckAnswer", "EventView", "EventsPage", "ack_events", "list_events"]

SEQ_MAX = 2**53  # event sequence numbers: JSON-safe, and inside SQLite's 64-bit integers
# Validated in full (0..SEQ_MAX, a typed error beyond); advertised without the bound, which no
# real sequence number comes near (it cost ~50 bytes of the model-read budget in two tools).
Seq = Annotated[int, Field(ge=0, le=SEQ_MAX), WithJsonSchema({"type": "integer", "minimum": 0})]


class EventView(BaseModel):
    """One fact from the event log."""

    model_config = ConfigDict(frozen=True)

    seq: int
    id: str
    kind: str
    subject: str
    created_at: str
    payload: dict[str, Any]


class EventsPage(BaseModel):
    model_config = ConfigDict(frozen=True)

    events: list[EventView]
    next_after: int = Field(description="pass as `after` for the next page")
    more: bool


class AckAnswer(BaseModel):
    model_config = ConfigDict(frozen=True)

    consumer: str
    cursor: int


@guarded("Use a smaller limit.")
async def list_events(
    ctx: Ctx,
    *,
    after: Seq = 0,
    limit: Annotated[int, Field(ge=1, le=200)] = 50,
    consumer: Annotated[
        str | None, Field(max_length=64, description="skip what it acknowledged")
    ] = None,
    wait_s: Annotated[float, Field(ge=0, le=60, description="wait this long for one")] = 0,
) -> EventsPage:
    """Pull clients: events after `after` (task ended, decision needed, site offline)."""
    rows = await daemon_link(ctx).call(
        lambda c: c.events(after=after, limit=limit + 1, consumer=consumer, wait_s=wait_s)
    )
    events = [EventView.model_validate(r) for r in rows[:limit]]
    return EventsPage(
        events=events, next_after=events[-1].seq if events else after, more=len(rows) > limit
    )


@guarded()
async def ack_events(
    ctx: Ctx,
    *,
    consumer: Annotated[str, Field(min_length=1, max_length=64)],
    through: Seq,
) -> AckAnswer:
    """Pull clients: mark events up to `through` handled for `consumer`."""
    check_consumer(consumer)
    cursor = await daemon_link(ctx).call(lambda c: c.ack_events(consumer, through))
    return AckAnswer(consumer=consumer, cursor=cursor)
