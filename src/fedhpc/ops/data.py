"""The data contract: move_data, stage-in and stage-out, and the transfer handle and view."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from fedhpc.domain.job import SafePath
from fedhpc.ops.continuations import ContinuationSpec

__all__ = [
    "DATA_REF_PATTERN",
    "DataLocation",
    "DataRef",
    "MoveDataRequest",
    "StageOut",
    "SyncLevel",
    "TransferHandle",
    "TransferIssue",
    "TransferMode",
    "TransferOptions",
    "TransferProvenance",
    "TransferRequest",
    "TransferState",
    "TransferView",
    "transfer_next",
]

# site:root/relative/path. The relative part is checked again, segment by segment, when the
# reference is resolved (no `..`, no control characters); this pattern only gives the shape.
DATA_REF_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}:[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}(/.*)?$"


def _ref(value: str) -> str:
    if any(ord(c) < 32 or c == "\x7f" for c in value):
        raise ValueError("a data reference holds no control characters")
    return value


DataRef = Annotated[
    str,
    Field(
        pattern=DATA_REF_PATTERN,
        max_length=4096,
        description="site:root/relative/path, e.g. devanvil:scratch/run1/out.dat",
        examples=["delta:work/proj/run1/out.dat"],
    ),
    AfterValidator(_ref),
]


class _In(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)


class TransferMode(StrEnum):
    """Why data moves: the same mechanics, recorded for provenance and shown to people."""

    STAGE = "stage"  # bring inputs to where a task will run
    REPLICATE = "replicate"  # copy results to another site for the next task
    RETURN = "return"  # bring results back to the user's home site


class SyncLevel(StrEnum):
    """Globus Transfer's sync levels: skip a file when the destination already matches."""

    EXISTS = "exists"
    SIZE = "size"
    MTIME = "mtime"
    CHECKSUM = "checksum"


class TransferState(StrEnum):
    """waiting (for a task to produce the source) -> queued -> active -> succeeded | failed."""

    WAITING = "waiting"
    QUEUED = "queued"
    ACTIVE = "active"
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    @property
    def terminal(self) -> bool:
        return self in (TransferState.SUCCEEDED, TransferState.FAILED)

    @property
    def rank(self) -> int:
        """Observations merge monotonically: a state never moves back to a lower rank."""
        return _RANK[self]


_RANK = {
    TransferState.WAITING: 0,
    TransferState.QUEUED: 1,
    TransferState.ACTIVE: 2,
    TransferState.SUCCEEDED: 3,
    TransferState.FAILED: 3,
}


class TransferOptions(_In):
    """How to copy: shared by move_data and a task's stage-out."""

    recursive: bool = Field(default=False, description="the source is a folder")
    sync_level: SyncLevel | None = Field(
        default=None, description="skip files the destination already has (default: copy all)"
    )
    verify_checksum: bool = Field(default=True, description="verify each file after copying")


class MoveDataRequest(TransferOptions):
    """move_data: copy between storage endpoints, never through the agent."""

    mode: TransferMode = TransferMode.REPLICATE
    source: DataRef
    destination: DataRef
    label: str | None = Field(
        default=None, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9 _.,+-]*$"
    )
    idempotency_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="retrying with the same key never transfers twice (default: from the request)",
    )
    continuation: ContinuationSpec | None = Field(
        default=None,
        description="wake this session for the transfer's events; stored with the transfer, "
        "so no event can come before it (not part of the request's identity)",
    )


class StageOut(TransferOptions):
    """A task's output to replicate once the task completes; its transfer id is known at
    submission, so the next task can declare it as stage-in right away."""

    source: SafePath = Field(description="relative to the task's workdir (or absolute in a root)")
    destination: DataRef
    mode: TransferMode = TransferMode.REPLICATE


class TransferRequest(_In):
    """GET /v1/transfers/{id}: the view, optionally with a bounded preview of the destination."""

    transfer_id: str = Field(min_length=1, max_length=64)
    preview: bool = False
    max_bytes: int = Field(default=4096, ge=1, le=65536)


class DataLocation(_Out):
    """A resolved reference: which site, which storage root, which collection, which path."""

    site: str
    root: str
    root_path: str = Field(description="the storage root's folder at the site")
    collection_id: str | None = None
    path: str


class TransferIssue(_Out):
    """Why a transfer failed (or is blocked), with a stable code and how to fix it."""

    code: str
    message: str
    hint: str = ""


_NEXT = (
    "Accepted. End your turn: fedhpc moves the data site to site and resumes you when it "
    "succeeds or fails. Do not poll, and do not copy the data yourself."
)
_ENDED_NOW = {
    "succeeded": "Done already: submit_task(..., stage_in=[transfer_id]) for the next step. "
    "fedhpc will not resume you for it: this answer is its outcome.",
    "failed": "Failed: `error` says why and how to fix it; then call move_data again with a "
    "new idempotency_key (the same arguments without one return this failed transfer). fedhpc "
    "will not resume you for it: this answer is its outcome.",
}


def transfer_next(state: str) -> str:
    """`next` of a move_data answer: wait for the resume, unless the outcome is already here."""
    return _ENDED_NOW.get(state, _NEXT)


_VIEW_ENDED = {
    "succeeded": "Succeeded: pass its transfer_id in submit_task's stage_in to run where the "
    "data landed.",
    "failed": "Failed: `error` says why and how to fix it; then call move_data again with a "
    "new idempotency_key (the same arguments without one return this failed transfer).",
}


def view_next(state: str, transfer_id: str, *, blocked: bool) -> str:
    """`next` of a transfer read later (resource fedhpc://transfers/{id}, `fedhpc transfers`):
    the reader may be any session, and whether one will be resumed is not known here, so it
    never says "end your turn"."""
    if state in _VIEW_ENDED:
        return _VIEW_ENDED[state]
    again = f"read fedhpc://transfers/{transfer_id} again later"
    if blocked:
        return f"Blocked: `blocked` says what a person must do; once done it goes on ({again})."
    return (
        f"Still {state}: {again}; if move_data's answer told you to end your turn, do: "
        "fedhpc resumes that session when it ends."
    )


class TransferHandle(_Out):
    """The immediate, durable answer of move_data."""

    transfer_id: str
    state: TransferState
    mode: TransferMode
    source: str
    destination: str
    backend: str
    after_task: str | None = None
    trace: tuple[str, ...] = Field(
        default=(), description="how the references and backend were chosen"
    )
    error: TransferIssue | None = Field(default=None, description="why it failed, and the fix")
    next: str = _NEXT


class TransferView(TransferHandle):
    """GET /v1/transfers/{id}: state, sizes and checksums; content only as a bounded preview."""

    source_location: DataLocation | None = None
    destination_location: DataLocation
    backend_id: str | None = None
    submission_id: str | None = None
    created_at: datetime
    submitted_at: datetime | None = None
    completed_at: datetime | None = None
    bytes: int | None = None
    files: int | None = None
    checksums: dict[str, str] = Field(default_factory=dict, description="relative path -> sha256")
    checksum_verified: bool | None = None
    error: TransferIssue | None = None
    blocked: TransferIssue | None = Field(default=None, description="waiting for a person")
    awaited_by: tuple[str, ...] = Field(default=(), description="tasks whose stage-in this is")
    preview: str | None = None
    truncated: bool = False

    @model_validator(mode="before")
    @classmethod
    def _next(cls, data: Any) -> Any:
        """A view says what to do in its own state (a handle's `next` is for the caller of
        move_data at the moment it answered)."""
        if isinstance(data, dict) and "next" not in data:
            state = str(getattr(data.get("state"), "value", data.get("state")))
            tid = str(data.get("transfer_id", ""))
            return {**data, "next": view_next(state, tid, blocked=bool(data.get("blocked")))}
        return data


class TransferProvenance(_Out):
    """One transfer in a task's manifest: where its data came from and what arrived."""

    transfer_id: str
    direction: str  # "stage_in" | "stage_out"
    state: TransferState
    mode: TransferMode
    source_site: str | None
    source_path: str | None
    destination_site: str
    destination_path: str
    backend: str
    bytes: int | None = None
    checksums: dict[str, str] = Field(default_factory=dict)
    after_task: str | None = None
