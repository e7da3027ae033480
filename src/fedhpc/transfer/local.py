"""The local backend: real copies between the local test federation's storage roots, run by a
worker process of their own (`local_copy`), with their own state folder per submission id."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import uuid
from functools import partial
from pathlib import Path

import anyio

from fedhpc.ops.data import TransferIssue, TransferState
from fedhpc.transfer.backend import BackendStatus, TransferSpec
from fedhpc.transfer.errors import TransferFailed

__all__ = ["LocalBackend"]

_WORKER = Path(__file__).with_name("local_copy.py")


# Every failure says how to fix it (the copier's messages name the path; these say the step).
_AGAIN = "Fix what the message says, then call move_data again with a new idempotency_key."
_HINTS = {
    "source_missing": "Check the source path (or let the task that writes it finish), then call "
    "move_data again with a new idempotency_key.",
    "source_is_folder": "Call move_data again with recursive=true and a new idempotency_key.",
    "source_not_folder": "Call move_data again with recursive=false and a new idempotency_key.",
    "outside_root": "Use a path inside the storage root; links out of it are not followed.",
    "destination_conflict": "Choose a destination path that is not a link or a folder.",
    "checksum_mismatch": "The source changed during the copy, or the copy is damaged: call "
    "move_data again with a new idempotency_key.",
}


class LocalBackend:
    """Same contract as Globus: `submit` is idempotent by submission id (the state folder's
    name); `status` reads the worker's result, and restarts a worker that died mid-copy."""

    name = "local"

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir

    def _dir(self, backend_id: str) -> Path:
        if not backend_id.startswith("loc-") or "/" in backend_id or ".." in backend_id:
            raise TransferFailed(f"{backend_id!r} is not a local transfer id")
        return self.state_dir / backend_id

    async def submission_id(self) -> str:
        return "loc-" + uuid.uuid4().hex

    async def submit(self, spec: TransferSpec) -> str:
        folder = self._dir(spec.submission_id)
        if not (folder / "spec.json").exists():  # a retried submit finds its folder: no copy twice
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            body = {
                "transfer_id": spec.transfer_id,
                "source_root": spec.source.root_path,
                "destination_root": spec.destination.root_path,
                "source": spec.source.path,
                "destination": spec.destination.path,
                "recursive": spec.recursive,
                "sync_level": spec.sync_level.value if spec.sync_level else None,
                "verify_checksum": spec.verify_checksum,
            }
            tmp = folder / "spec.tmp"
            tmp.write_text(json.dumps(body, sort_keys=True))
            os.replace(tmp, folder / "spec.json")
        await self._ensure_worker(folder)
        return spec.submission_id

    async def status(self, backend_id: str) -> BackendStatus:
        folder = self._dir(backend_id)
        if not (folder / "spec.json").exists():
            return BackendStatus(
                TransferState.FAILED,
                error=TransferIssue(
                    code="lost", message=f"no local transfer {backend_id}", hint=_AGAIN
                ),
            )
        result = folder / "result.json"
        if not result.exists():
            await self._ensure_worker(folder)
            return BackendStatus(TransferState.ACTIVE)
        data = json.loads(result.read_text())
        if data["state"] == "succeeded":
            return BackendStatus(
                TransferState.SUCCEEDED,
                bytes=data["bytes"],
                files=data["files"],
                checksums=dict(data["checksums"]),
                checksum_verified=data["checksum_verified"],
            )
        code = str(data["code"])
        return BackendStatus(
            TransferState.FAILED,
            error=TransferIssue(code=code, message=data["message"], hint=_HINTS.get(code, _AGAIN)),
        )

    async def _ensure_worker(self, folder: Path) -> None:
        """Start a worker unless one runs (holds the folder's lock) or the result is written.
        We take the lock ourselves and hand that very descriptor to the worker, so there is
        no moment in which a second worker could start."""
        fd = os.open(folder / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # a worker is copying
            if (folder / "result.json").exists():
                return
            # setsid -f: the worker is not our child, so it outlives a daemon restart and leaves
            # no zombie; setsid itself returns at once. -I: the worker needs the stdlib only.
            argv = ["setsid", "-f", sys.executable, "-I", str(_WORKER), str(folder), str(fd)]
            with (folder / "worker.log").open("ab") as log:
                # Off the loop (a fork on a busy machine holds it tens of ms; see
                # adapters/transports/process.py), never abandoned: setsid returns at once.
                await anyio.to_thread.run_sync(
                    partial(
                        subprocess.run,
                        argv,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=log,
                        pass_fds=(fd,),
                        check=True,
                    )
                )
        finally:
            os.close(fd)  # the worker's inherited descriptor keeps the lock until it exits
