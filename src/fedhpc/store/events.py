"""Events: append-only facts with stable ids that consumers read after their cursor."""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = ["Event", "event_id"]


def event_id(key: str | None) -> str:
    """A stable id: derived from `key` when the fact has a natural identity, else random."""
    if key is None:
        return "ev_" + uuid.uuid4().hex
    return "ev_" + hashlib.sha256(key.encode()).hexdigest()[:32]


class Event(BaseModel):
    """One row of the event log."""

    model_config = ConfigDict(frozen=True)

    seq: int
    id: str
    kind: str
    subject: str
    created_at: datetime
    payload: dict[str, Any]

    @classmethod
    def from_row(cls, row: Any) -> Event:
        return cls(
            seq=row["seq"],
            id=row["id"],
            kind=row["kind"],
            subject=row["subject"],
            created_at=datetime.fromisoformat(row["created_at"]),
            payload=json.loads(row["payload"]),
        )
