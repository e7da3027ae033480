"""A delivery as the bridge handles it: the store's row, typed. The body's known keys are
fields; a key it does not know (written by another fedhpc) is kept, and a body is written back
with exactly the keys it was read or given (`dump`), so the stored rows stay as they were."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Delivery", "DeliveryBody"]


class DeliveryBody(BaseModel):
    """What a delivery carries, from routing (payload ... key) and from the bridge (resume ...
    unreached): set at routing, then as its resumes go."""

    model_config = ConfigDict(extra="allow")

    payload: dict[str, Any] = Field(default_factory=dict)  # what the agent is shown
    runtime: str | None = None
    spec: dict[str, Any] = Field(default_factory=dict)  # the ContinuationSpec, as registered
    seq: int = 0  # the event's place in the log: a session's deliveries go in this order
    kind: str | None = None  # the event's kind
    subject: str | None = None
    key: str | None = None  # the queue: the session (routing.session_key)
    resume: str | None = None  # the resume it was last launched in (absent: none yet)
    # Where that resume runs: its folder, on this host. A daemon that takes over a shared
    # store settles it there, not in a folder of its own home that never saw it.
    folder: str | None = None
    host: str | None = None
    launched: bool = False  # a resume was started with it: the session may hold it
    held: bool = False  # the session held it when the last resume started
    tools_verified: bool | None = None  # the resumed turn had fedhpc's tools (None: unknown)
    last_error: str | None = None
    redriven: int = 0  # times a person redrove it from dead
    unreached: int = 0  # a resumed turn with it could not reach the daemon (once is allowed)

    def dump(self) -> dict[str, Any]:
        """The body as stored: the keys read or set, nothing added."""
        return self.model_dump(mode="json", exclude_unset=True)

    def without(self, *keys: str) -> DeliveryBody:
        """The same body without these keys (as if never set)."""
        return DeliveryBody.model_validate({k: v for k, v in self.dump().items() if k not in keys})


@dataclass(slots=True)
class Delivery:
    """One row of the deliveries table (`Store.deliveries`)."""

    id: str
    event_id: str
    continuation_id: str
    state: str
    attempts: int
    next_at: str  # ISO 8601, as stored: compared as text with another ISO time
    body: DeliveryBody

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Delivery:
        return cls(
            id=str(row["id"]),
            event_id=str(row["event_id"]),
            continuation_id=str(row["continuation_id"]),
            state=str(row["state"]),
            attempts=int(row["attempts"]),
            next_at=str(row["next_at"]),
            body=DeliveryBody.model_validate(row["body"]),
        )

    @property
    def queue(self) -> str:
        """The queue it waits in: its session, else its continuation."""
        return str(self.body.key or f"continuation:{self.continuation_id}")
