"""What a change of a transfer's record tells: the record written with the tasks that came to
wait for it meanwhile, and an event only where someone has a decision to make."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from fedhpc.ops.data import TransferState
from fedhpc.store import Tx
from fedhpc.transfer import records
from fedhpc.transfer.records import TransferRecord

__all__ = ["save"]


async def save(
    tx: Tx,
    rec: TransferRecord,
    *,
    clock: Callable[[], datetime],
    blocked: bool = False,
    answered: bool = False,
) -> None:
    """Write the record; tasks may have registered as waiters meanwhile, so they are merged
    from the stored row in the same transaction that decides the event. `blocked`: the change
    is a new block; `answered`: the caller of move_data reads this change in its answer."""
    stored = await records.get(tx, rec.id)
    if stored is not None:
        rec.awaited_by = tuple(sorted(set(rec.awaited_by) | set(stored.awaited_by)))
        was_terminal = stored.state.terminal
    else:
        was_terminal = False
    await records.put(tx, rec, at=clock())
    if rec.state.terminal and not was_terminal:
        await _emit_terminal(tx, rec, clock, answered)
    # Like its outcome, a block of a transfer that tasks wait for is told through them:
    # the orchestrator's next cycle raises task.stage_in_blocked for each (staging).
    if blocked and rec.blocked is not None and not rec.awaited_by:
        await _emit(
            tx,
            "transfer.blocked",
            rec,
            clock,
            answered,
            key=f"{rec.id}:{rec.blocks}",
            error=rec.blocked.model_dump(),
        )


async def _emit_terminal(
    tx: Tx, rec: TransferRecord, clock: Callable[[], datetime], answered: bool
) -> None:
    """Decision-relevant only: a transfer a task waits on reports through that task (the
    task runs, or its stage-in failure is the task's one exception event); a failure
    caused by the producing task is already that task's event."""
    if rec.awaited_by or rec.cause == "upstream":
        return
    if rec.state is TransferState.SUCCEEDED:
        await _emit(
            tx, "transfer.succeeded", rec, clock, answered, bytes=rec.bytes, files=rec.files
        )
    else:
        error = rec.error.model_dump() if rec.error else None
        await _emit(tx, "transfer.failed", rec, clock, answered, error=error)


async def _emit(
    tx: Tx,
    kind: str,
    rec: TransferRecord,
    clock: Callable[[], datetime],
    answered: bool,
    *,
    key: str | None = None,
    **payload: Any,
) -> None:
    body: dict[str, Any] = {
        "transfer_id": rec.id,
        "state": rec.state.value,
        "mode": rec.mode.value,
        "source": rec.source_ref,
        "destination": rec.destination_ref,
        "result": f"fedhpc://transfers/{rec.id}",
    }
    if rec.after_task:
        body["after_task"] = rec.after_task
    if answered:  # logged, but its caller already has it: wakes nobody
        body["answered"] = True
    body.update({k: v for k, v in payload.items() if v is not None})
    await tx.append_event(kind, rec.id, body, at=clock(), key=f"{kind}:{key or rec.id}")
