"""Writing a continuation row in the caller's transaction: with the task, group or transfer
it wakes for, so no event of that subject can come before it."""

from __future__ import annotations

from datetime import datetime

from fedhpc.ops.continuations import ContinuationSpec, continuation_id
from fedhpc.store.tx import Tx

__all__ = ["put_continuation"]


async def put_continuation(tx: Tx, subject: str, spec: ContinuationSpec, *, at: datetime) -> str:
    """Idempotent per subject and spec (the same spec again is the same row); its id."""
    cid = continuation_id(subject, spec)
    await tx.put_continuation(
        cid, subject=subject, runtime=spec.runtime.value, body=spec.model_dump(mode="json"), at=at
    )
    return cid
