"""What the store keeps per transfer (a JSON body in the `transfers` table) and how it is read
and written. Reads that precede a write happen in the same transaction as the write."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field

from fedhpc.ops.data import (
    DataLocation,
    TransferHandle,
    TransferIssue,
    TransferMode,
    TransferOptions,
    TransferProvenance,
    TransferState,
    TransferView,
    transfer_next,
)
from fedhpc.store import Tx, sql_pg

__all__ = [
    "TransferRecord",
    "get",
    "get_by_key",
    "in_states",
    "new_transfer_id",
    "put",
    "stage_out_id",
]


def new_transfer_id() -> str:
    return "x" + uuid.uuid4().hex[:11]


def stage_out_id(task_id: str, index: int) -> str:
    """Stage-out ids are derived from the task, so a retried submit names the same transfers."""
    return "x" + hashlib.sha256(f"{task_id}:stage_out:{index}".encode()).hexdigest()[:11]


class TransferRecord(BaseModel):
    """One transfer: the intent, its submission id (persisted BEFORE submitting), observations."""

    model_config = ConfigDict(extra="forbid")

    id: str
    idempotency_key: str
    mode: TransferMode
    source_ref: str  # site:root/path, or task:<id>/<path> for a stage-out
    destination_ref: str
    source: DataLocation | None  # None until the producing task completed
    destination: DataLocation
    options: TransferOptions = Field(default_factory=TransferOptions)
    label: str = ""
    backend: str | None  # None until the source is known
    state: TransferState = TransferState.QUEUED
    after_task: str | None = None
    source_rel: str | None = None
    submission_id: str | None = None
    backend_id: str | None = None
    created_at: datetime
    submitted_at: datetime | None = None
    completed_at: datetime | None = None
    bytes: int | None = None
    files: int | None = None
    checksums: dict[str, str] = Field(default_factory=dict)
    checksum_verified: bool | None = None
    error: TransferIssue | None = None
    blocked: TransferIssue | None = None
    blocks: int = 0  # how many times it became blocked: each block is told once
    cause: str | None = None  # "upstream": the producing task failed (its own event says so)
    owner: str | None = None  # who asked (service mode); a stage-out: its task's owner
    awaited_by: tuple[str, ...] = ()
    trace: tuple[str, ...] = ()

    def handle(self) -> TransferHandle:
        return TransferHandle(
            transfer_id=self.id,
            state=self.state,
            mode=self.mode,
            source=self.source_ref,
            destination=self.destination_ref,
            backend=self.backend or "pending",
            after_task=self.after_task,
            trace=self.trace,
            error=self.error,
            next=transfer_next(self.state.value),
        )

    def view(self, preview: str | None = None, truncated: bool = False) -> TransferView:
        return TransferView(
            **self.handle().model_dump(exclude={"next", "error"}),
            source_location=self.source,
            destination_location=self.destination,
            backend_id=self.backend_id,
            submission_id=self.submission_id,
            created_at=self.created_at,
            submitted_at=self.submitted_at,
            completed_at=self.completed_at,
            bytes=self.bytes,
            files=self.files,
            checksums=self.checksums,
            checksum_verified=self.checksum_verified,
            error=self.error,
            blocked=self.blocked,
            awaited_by=self.awaited_by,
            preview=preview,
            truncated=truncated,
        )

    def provenance(self, direction: str) -> TransferProvenance:
        return TransferProvenance(
            transfer_id=self.id,
            direction=direction,
            state=self.state,
            mode=self.mode,
            source_site=self.source.site if self.source else None,
            source_path=self.source.path if self.source else None,
            destination_site=self.destination.site,
            destination_path=self.destination.path,
            backend=self.backend or "pending",
            bytes=self.bytes,
            checksums=self.checksums,
            after_task=self.after_task,
        )


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat()


async def put(tx: Tx, rec: TransferRecord, *, at: datetime) -> bool:
    """Insert or update; False when the idempotency key already belongs to another transfer."""
    owner = rec.owner  # written with the new row only: an update never moves it
    if tx.dialect == "postgresql":  # one ON CONFLICT clause there: insert, else update
        stamp = (_iso(rec.created_at), _iso(at))
        body = rec.model_dump_json()
        insert = (rec.id, rec.idempotency_key, *stamp, rec.state.value, body, owner)
        if await tx.execute(sql_pg.PUT_TRANSFER_INSERT, insert):
            return True
        update = (rec.state.value, rec.model_dump_json(), _iso(at), rec.id)
        return await tx.execute(sql_pg.PUT_TRANSFER_UPDATE, update) > 0
    n = await tx.execute(
        "INSERT INTO transfers (id, idempotency_key, created_at, updated_at, state, body, owner) "
        "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET state = excluded.state, "
        "body = excluded.body, updated_at = excluded.updated_at ON CONFLICT DO NOTHING",
        (
            rec.id,
            rec.idempotency_key,
            _iso(rec.created_at),
            _iso(at),
            rec.state.value,
            rec.model_dump_json(),
            owner,
        ),
    )
    return n > 0


async def _select(tx: Tx, where: str, params: Sequence[object]) -> list[TransferRecord]:
    rows = await tx.fetch(
        f"SELECT body FROM transfers WHERE {where} ORDER BY created_at, id",  # noqa: S608 (fixed clauses)
        tuple(params),
    )
    return [TransferRecord.model_validate(json.loads(r[0])) for r in rows]


async def get(tx: Tx, transfer_id: str) -> TransferRecord | None:
    rows = await _select(tx, "id = ?", (transfer_id,))
    return rows[0] if rows else None


async def get_by_key(tx: Tx, key: str) -> TransferRecord | None:
    rows = await _select(tx, "idempotency_key = ?", (key,))
    return rows[0] if rows else None


async def in_states(tx: Tx, states: Sequence[TransferState]) -> list[TransferRecord]:
    marks = ",".join("?" * len(states))
    return await _select(tx, f"state IN ({marks})", [s.value for s in states])
