"""The Globus Transfer backend: TransferClient/TransferData between collections. The SDK is
synchronous and heavy: it is imported here only, lazily, and called in a worker thread."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from fedhpc.globus_auth.people import PersonNotAuthorized, acting_person, installed
from fedhpc.ops.data import TransferIssue, TransferState
from fedhpc.transfer.backend import BackendStatus, TransferSpec
from fedhpc.transfer.errors import TransferAuthError, TransferFailed, TransferUnavailable

if TYPE_CHECKING:
    # startup: the Globus SDKs only when a Globus site or login is used
    import globus_sdk

__all__ = ["GlobusBackend", "acting_transfer_client", "daemon_transfer_client"]

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
    """A TransferClient that never prompts: the person's `fedhpc login` tokens (refreshed and
    rotated), or a service identity (GLOBUS_CLIENT_ID and GLOBUS_CLIENT_SECRET); the precedence
    is `fedhpc.globus_auth.identity.choose_identity`'s."""
    # startup: the Globus SDKs only when a Globus site or login is used
    from fedhpc.globus_auth.apps import transfer_client

    return transfer_client(home)


def acting_transfer_client(home: Path) -> globus_sdk.TransferClient:
    """The client of the person a call is made for (`acting_for`, a transfer touching a site
    that runs each person as themselves): their own Transfer token from the service's store;
    else the daemon's (`daemon_transfer_client`)."""
    person, tokens = acting_person(), installed()
    if person is None:
        return daemon_transfer_client(home)
    if tokens is None:
        raise PersonNotAuthorized(
            "this transfer's site runs each person as themselves, and this daemon keeps "
            "nobody's tokens ([service.facade] is not configured)",
            "transfer",
        )
    # startup: the Globus SDKs only when a Globus site or login is used
    from fedhpc.globus_auth.apps import person_transfer_client

    return person_transfer_client(tokens, person)


def _classify(exc: Exception, home: Path | None = None) -> Exception:
    """SDK exceptions -> our taxonomy (login / auth / request / transient). Never leaks
    tokens: only the API's code and message are kept."""
    # startup: the Globus SDKs only when a Globus site or login is used
    import globus_sdk

    from fedhpc.globus_auth.apps import translate as auth_error

    if (login := auth_error(exc, home)) is not None:
        return login  # a missing consent or login: the hint is the exact `fedhpc login` command
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

    def __init__(
        self, client_factory: Callable[[], globus_sdk.TransferClient], *, home: Path | None = None
    ) -> None:
        self._factory = client_factory  # asked on every call: a new login is picked up at once
        self._home = home

    def _tc(self) -> globus_sdk.TransferClient:
        return self._factory()

    async def _call(self, fn: Callable[[], Any]) -> Any:
        def run() -> Any:
            try:
                return fn()
            except Exception as exc:
                raise _classify(exc, self._home) from None

        return await anyio.to_thread.run_sync(run)

    async def submission_id(self) -> str:
        data = await self._call(lambda: self._tc().get_submission_id())
        return str(data["value"])

    async def submit(self, spec: TransferSpec) -> str:
        # startup: the Globus SDKs only when a Globus site or login is used
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
            return BackendStatus(
                TransferState.SUCCEEDED, bytes=moved, files=files, checksum_verified=verified
            )
        if status == "FAILED":
            fatal = doc.get("fatal_error") or {}
            return BackendStatus(
                TransferState.FAILED,
                bytes=moved,
                files=files,
                error=TransferIssue(
                    code=str(fatal.get("code") or nice or "FAILED"),
                    message=str(
                        fatal.get("description")
                        or doc.get("nice_status_short_description")
                        or "the Globus task failed"
                    ),
                ),
            )
        blocked = None
        if status == "INACTIVE" or nice in _BLOCKED:
            blocked = TransferIssue(
                code=nice or status,
                message=str(
                    doc.get("nice_status_short_description")
                    or f"the Globus task is {status.lower()} ({nice})"
                ),
                hint=TransferAuthError.default_hint,
            )
        return BackendStatus(TransferState.ACTIVE, bytes=moved, files=files, blocked=blocked)
