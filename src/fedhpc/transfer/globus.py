"""The Globus Transfer backend: TransferClient/TransferData between collections. The SDK is
synchronous and heavy: it is imported here only, lazily, and called in a worker thread."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from fedhpc.ops.data import TransferError, TransferState
from fedhpc.transfer.backend import BackendStatus, TransferSpec
from fedhpc.transfer.errors import TransferAuthError, TransferFailed, TransferUnavailable

if TYPE_CHECKING:
    import globus_sdk

__all__ = ["GlobusBackend", "daemon_transfer_client"]

# Error codes of the Transfer API that mean "a person must renew credentials or consent".
_AUTH_CODES = {
    "AuthenticationFailed",
    "ConsentRequired",
    "PermissionDenied",
    "ClientError.AuthenticationFailed",
}
# Task nice_status values while ACTIVE/INACTIVE that wait for a person, not for the network.
_BLOCKED = {"AUTH", "CONSENT_REQUIRED", "PAUSED_BY_ADMIN", "PERMISSION_DENIED"}


def daemon_transfer_client(home: Path) -> globus_sdk.TransferClient:
    """A TransferClient that never prompts: client credentials (GLOBUS_CLIENT_ID and
    GLOBUS_CLIENT_SECRET) as a service identity, else the user's stored refresh tokens
    (GLOBUS_CLIENT_ID of a native app the user logged in with once)."""
    import globus_sdk
    from globus_sdk.token_storage import SQLiteTokenStorage

    client_id = os.environ.get("GLOBUS_CLIENT_ID")
    if not client_id:
        raise TransferAuthError("no Globus client configured (GLOBUS_CLIENT_ID is unset)")
    config = globus_sdk.GlobusAppConfig(
        token_storage=SQLiteTokenStorage(home / "globus-tokens.db"),
        request_refresh_tokens=True,
        token_validation_error_handler=None,  # the default would start a login on stdin
    )
    secret = os.environ.get("GLOBUS_CLIENT_SECRET")
    app: globus_sdk.GlobusApp
    if secret:
        app = globus_sdk.ClientApp("fedhpc", client_id=client_id, client_secret=secret,
                                   config=config)  # fmt: skip
    else:
        app = globus_sdk.UserApp("fedhpc", client_id=client_id, config=config)
    return globus_sdk.TransferClient(app=app)


def _classify(exc: Exception) -> Exception:
    """SDK exceptions -> our taxonomy (auth / request / transient). Never leaks tokens: only
    the API's code and message are kept."""
    import globus_sdk
    from globus_sdk.token_storage.validating_token_storage.errors import TokenValidationError

    if isinstance(exc, TokenValidationError):
        return TransferAuthError(f"Globus credentials are missing or expired: {type(exc).__name__}")
    if isinstance(exc, globus_sdk.GlobusAPIError):
        code, msg = str(exc.code), str(exc.message)
        if exc.http_status in (401, 403) or code in _AUTH_CODES:
            return TransferAuthError(f"Globus refused the daemon's credentials ({code}): {msg}")
        if exc.http_status >= 500 or exc.http_status == 429:
            return TransferUnavailable(f"Globus Transfer answered {exc.http_status} ({code})")
        return TransferFailed(f"Globus Transfer refused the request ({code}): {msg}")
    if isinstance(exc, globus_sdk.NetworkError):
        return TransferUnavailable(f"Globus Transfer unreachable: {type(exc).__name__}")
    return exc


class GlobusBackend:
    """Submits under a persisted submission id: Globus answers a repeated submission id with
    the original task ("Duplicate"), so a retry never starts a second transfer."""

    name = "globus"

    def __init__(self, client_factory: Callable[[], globus_sdk.TransferClient]) -> None:
        self._factory = client_factory
        self._client: globus_sdk.TransferClient | None = None

    def _tc(self) -> globus_sdk.TransferClient:
        if self._client is None:
            self._client = self._factory()
        return self._client

    async def _call(self, fn: Callable[[], Any]) -> Any:
        def run() -> Any:
            try:
                return fn()
            except Exception as exc:
                raise _classify(exc) from None

        return await anyio.to_thread.run_sync(run)

    async def submission_id(self) -> str:
        data = await self._call(lambda: self._tc().get_submission_id())
        return str(data["value"])

    async def submit(self, spec: TransferSpec) -> str:
        import globus_sdk

        if not (spec.source.collection_id and spec.destination.collection_id):
            raise TransferFailed("a Globus transfer needs a collection id at both ends")
        tdata = globus_sdk.TransferData(
            spec.source.collection_id,
            spec.destination.collection_id,
            label=spec.label or f"fedhpc {spec.transfer_id}",
            submission_id=spec.submission_id,
            sync_level=spec.sync_level.value if spec.sync_level else globus_sdk.MISSING,
            verify_checksum=spec.verify_checksum,
        )
        tdata.add_item(spec.source.path, spec.destination.path, recursive=spec.recursive)
        data = await self._call(lambda: self._tc().submit_transfer(tdata))
        # "Accepted" for a new task, "Duplicate" when this submission id was seen before:
        # both carry the task id of the one transfer.
        return str(data["task_id"])

    async def status(self, backend_id: str) -> BackendStatus:
        doc = await self._call(lambda: self._tc().get_task(backend_id))
        status, nice = str(doc["status"]), str(doc.get("nice_status") or "")
        moved = doc.get("bytes_transferred")
        files = doc.get("files_transferred")
        verified = doc.get("verify_checksum")
        if status == "SUCCEEDED":
            return BackendStatus(TransferState.SUCCEEDED, bytes=moved, files=files,
                                 checksum_verified=verified)  # fmt: skip
        if status == "FAILED":
            fatal = doc.get("fatal_error") or {}
            return BackendStatus(
                TransferState.FAILED, bytes=moved, files=files,
                error=TransferError(code=str(fatal.get("code") or nice or "FAILED"),
                                    message=str(fatal.get("description") or
                                                doc.get("nice_status_short_description") or
                                                "the Globus task failed")),
            )  # fmt: skip
        blocked = None
        if status == "INACTIVE" or nice in _BLOCKED:
            blocked = TransferError(
                code=nice or status,
                message=str(doc.get("nice_status_short_description") or
                            f"the Globus task is {status.lower()} ({nice})"),
                hint=TransferAuthError.default_hint,
            )  # fmt: skip
        return BackendStatus(TransferState.ACTIVE, bytes=moved, files=files, blocked=blocked)
