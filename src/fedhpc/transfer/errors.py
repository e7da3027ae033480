"""Typed transfer errors: each with a stable code and a hint saying how to fix it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedhpc.errors import Conflict, ErrorKind, PermanentError, TransientError, UsageError

__all__ = [
    "BadDataRef",
    "KeyConflict",
    "NoCollection",
    "OutsideRoot",
    "PathTraversal",
    "RootUnexpanded",
    "TransferAuthError",
    "TransferFailed",
    "TransferNotFound",
    "TransferUnavailable",
    "UnknownRoot",
    "UnknownSite",
    "UnsupportedRoute",
    "upstream_hint",
]


class BadDataRef(UsageError):
    """The reference does not have the form site:root/relative/path."""

    code = "bad_data_ref"
    kind = ErrorKind.VALIDATION
    default_hint = "Write references as site:root/relative/path, e.g. delta:work/run1/out.dat."


class KeyConflict(Conflict):
    """The idempotency_key already names a transfer of other arguments."""

    code = "idempotency_conflict"
    default_hint = (
        "An idempotency_key names one request: send the same arguments to get that transfer "
        "back, or use a new key for new work."
    )


class PathTraversal(UsageError):
    """The relative path tries to leave its storage root (`..`, absolute, control characters)."""

    code = "path_traversal"
    kind = ErrorKind.VALIDATION
    default_hint = "Use a path relative to the storage root, without `..` segments."


class UnknownSite(UsageError):
    code = "unknown_site"
    kind = ErrorKind.NOT_FOUND
    default_hint = "List the enabled sites with `fedhpc status`."


class UnknownRoot(UsageError):
    code = "unknown_root"
    kind = ErrorKind.NOT_FOUND
    default_hint = "Use a storage root the site's profile names (e.g. scratch, work, home)."


class NoCollection(UsageError):
    """A Globus transfer needs a collection id for the storage root, and none is configured."""

    code = "unknown_collection"
    default_hint = (
        'Add it to your config.toml: [sites.<site>.collections] <root> = "<collection uuid>".'
    )


class UnsupportedRoute(UsageError):
    """No backend can move data between these two sites."""

    code = "unsupported_route"


class OutsideRoot(PermanentError):
    """A path resolves (through a symlink or a task's workdir) outside every configured root."""

    code = "outside_root"
    kind = ErrorKind.VALIDATION
    default_hint = "Keep task outputs and transfer paths inside the site's storage roots."


class RootUnexpanded(PermanentError):
    """A storage root given as a login-shell variable (`$SCRATCH`) is unset at the site, or no
    connection to the site exists to expand it: no path is guessed, no `$NAME` folder made."""

    code = "root_unexpanded"
    kind = ErrorKind.VALIDATION


class TransferNotFound(UsageError):
    code = "not_found"
    kind = ErrorKind.NOT_FOUND
    default_hint = "Transfer ids come from move_data or a task's stage_out."


class TransferAuthError(PermanentError):
    """The transfer service refused our credentials (expired consent, missing tokens, 401/403).
    A person must log in again; the daemon never prompts."""

    code = "transfer_auth"
    kind = ErrorKind.USAGE
    default_hint = (
        "Run `fedhpc login` to renew your Globus login and consents (see `fedhpc login "
        "--status`), or, for a service identity, check GLOBUS_CLIENT_ID/GLOBUS_CLIENT_SECRET."
    )


class TransferFailed(PermanentError):
    """The backend refused or failed the transfer; retrying the same request fails the same."""

    code = "transfer_failed"


class TransferUnavailable(TransientError):
    """The transfer service did not answer (network, 5xx): the daemon retries next cycle."""

    code = "transfer_unavailable"


def upstream_hint(task: str, row: Mapping[str, Any] | None) -> str:
    """What to do when a stage-out's task ended without output: its tasks that wait for the
    copy end failed too (`task.stage_in_failed` is not raised: the task's own event said why)."""
    if row is None:
        return (
            f"The store has no task {task}: submit it again with its stage_out, and the tasks "
            "that waited for this transfer with the new task's transfers as stage_in."
        )
    return (
        f"get_result('{task}') says why it did not complete. Fix that and submit it again with "
        "its stage_out; tasks that waited for this transfer failed too: submit them again with "
        "the new task's transfers as stage_in."
    )
