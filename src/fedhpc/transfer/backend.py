"""The transfer backend seam: submit a spec under a persisted submission id, then poll."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from fedhpc.ops.data import DataLocation, SyncLevel, TransferIssue, TransferState

__all__ = ["BackendStatus", "TransferBackend", "TransferSpec"]


@dataclass(frozen=True, slots=True)
class TransferSpec:
    """One copy, fully resolved: what a backend needs and nothing else."""

    transfer_id: str
    submission_id: str
    source: DataLocation
    destination: DataLocation
    recursive: bool = False
    sync_level: SyncLevel | None = None
    verify_checksum: bool = True
    label: str = ""


@dataclass(frozen=True, slots=True)
class BackendStatus:
    """One observation of a submitted transfer; merged into the record monotonically."""

    state: TransferState
    bytes: int | None = None
    files: int | None = None
    checksums: dict[str, str] = field(default_factory=dict)
    checksum_verified: bool | None = None
    error: TransferIssue | None = None
    blocked: TransferIssue | None = None  # still active, but waits for a person (credentials)


class TransferBackend(Protocol):
    """How one kind of endpoint moves data.

    Contract:
    * `submission_id()` returns a fresh id; the caller PERSISTS it before calling `submit`.
    * `submit(spec)` is idempotent by `spec.submission_id`: calling it again (after a crash,
      a timeout, a retry) returns the same backend id and never starts a second copy.
    * `status(backend_id)` observes; it never changes the transfer.
    * Errors: `TransferAuthError` (a person must renew credentials), `TransferFailed` (the
      request itself is wrong), `TransferUnavailable` (try again next cycle).
    """

    name: str

    async def submission_id(self) -> str: ...

    async def submit(self, spec: TransferSpec) -> str: ...

    async def status(self, backend_id: str) -> BackendStatus: ...
