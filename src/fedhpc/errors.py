"""One error root and a small taxonomy; every error carries a stable code and a hint."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any, ClassVar

__all__ = [
    "EXIT_CODES",
    "HTTP_STATUS",
    "Conflict",
    "ErrorKind",
    "FedError",
    "FieldIssue",
    "NotFound",
    "OverBudget",
    "PermanentError",
    "ProfileError",
    "TooLarge",
    "TransientError",
    "UsageError",
    "ValidationFailed",
    "typed_error",
    "typed_errors",
]


class FieldIssue:
    """One problem with one input field, addressed by a dotted path."""

    __slots__ = ("field", "reason")

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason

    def __repr__(self) -> str:
        return f"FieldIssue({self.field!r}, {self.reason!r})"

    def as_dict(self) -> dict[str, str]:
        return {"field": self.field, "reason": self.reason}


class ErrorKind(StrEnum):
    """The class of an error, which decides the HTTP status and the CLI exit code (the table in
    docs/errors.md). `code` says what went wrong; `kind` says whose move it is."""

    USAGE = "usage"  # the call cannot work as asked: fix the call or the setup
    VALIDATION = "validation"  # a field is out of range or malformed: fix the named field
    TOO_LARGE = "too_large"  # over a documented size cap: send less
    NOT_FOUND = "not_found"  # the named task, group, transfer, site or path does not exist
    CONFLICT = "conflict"  # the target refused in its current state; retrying fails the same
    UNAVAILABLE = "unavailable"  # the daemon, a site or a service cannot answer now: retry
    INTERNAL = "internal"  # fedhpc failed: a bug; the log has the details


HTTP_STATUS: dict[ErrorKind, int] = {
    ErrorKind.USAGE: 400,
    ErrorKind.VALIDATION: 422,
    ErrorKind.TOO_LARGE: 413,
    ErrorKind.NOT_FOUND: 404,
    ErrorKind.CONFLICT: 409,
    ErrorKind.UNAVAILABLE: 503,
    ErrorKind.INTERNAL: 500,
}

# 2 is also what argparse exits with for a bad command line; 1 stays "failed, see the output".
EXIT_CODES: dict[ErrorKind, int] = {
    ErrorKind.USAGE: 2,
    ErrorKind.VALIDATION: 3,
    ErrorKind.TOO_LARGE: 3,
    ErrorKind.NOT_FOUND: 4,
    ErrorKind.CONFLICT: 5,
    ErrorKind.UNAVAILABLE: 6,
    ErrorKind.INTERNAL: 70,  # EX_SOFTWARE (sysexits.h)
}


class FedError(Exception):
    """Root of every error fedhpc raises on purpose; `code` is stable, `hint` says how to fix it,
    `kind` is its class (HTTP status, exit code)."""

    code: ClassVar[str] = "error"
    kind: ClassVar[ErrorKind] = ErrorKind.INTERNAL
    default_hint: ClassVar[str] = ""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint if hint is not None else self.default_hint

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "hint": self.hint}


class UsageError(FedError):
    """The caller asked for something that cannot work as asked (wrong command, missing setup)."""

    code = "usage"
    kind = ErrorKind.USAGE


class NotFound(UsageError):
    """The named thing (task, group, transfer, site, root) does not exist."""

    code = "not_found"
    kind = ErrorKind.NOT_FOUND


class TooLarge(UsageError):
    """Over a documented size cap (request body, text field, group, page)."""

    code = "too_large"
    kind = ErrorKind.TOO_LARGE
    default_hint = "Send less: references instead of content, or split the request."


class Conflict(UsageError):
    """The target exists but refuses the call in its current state."""

    code = "conflict"
    kind = ErrorKind.CONFLICT


class OverBudget(FedError):
    """CPU-heavy work (drafting, a large placement) ran past its time bound and was abandoned."""

    code = "over_budget"
    kind = ErrorKind.UNAVAILABLE
    default_hint = "Send a shorter request, or retry when the daemon is less busy."


class ValidationFailed(FedError):
    """Input failed validation; `issues` names every offending field."""

    code = "validation"
    kind = ErrorKind.VALIDATION
    default_hint = "Fix the named fields and send the request again."

    def __init__(self, issues: Sequence[FieldIssue], *, hint: str | None = None) -> None:
        self.issues = list(issues)
        message = "; ".join(f"{i.field}: {i.reason}" for i in self.issues) or "invalid input"
        super().__init__(message, hint=hint)

    def as_dict(self) -> dict[str, Any]:
        out = super().as_dict()
        out["fields"] = [i.as_dict() for i in self.issues]
        return out


class ProfileError(FedError):
    """A site profile or user config file is broken: names the file, the key and the reason."""

    code = "profile"
    kind = ErrorKind.VALIDATION

    def __init__(self, path: str, key: str, reason: str, hint: str = "") -> None:
        self.path = path
        self.key = key
        self.reason = reason
        # The message already says where and what; a hint only where it adds the way out.
        super().__init__(f"{path}: {key}: {reason}", hint=hint)


class TransientError(FedError):
    """Worth retrying: the site or service may answer next time (timeouts, connection loss)."""

    code = "transient"
    kind = ErrorKind.UNAVAILABLE
    default_hint = "Retry later; fedhpc retries this itself within its budget."


class PermanentError(FedError):
    """Retrying the same call fails the same way (rejected by the scheduler, bad credentials)."""

    code = "permanent"
    kind = ErrorKind.CONFLICT


def typed_errors(exc: BaseException) -> list[FedError]:
    """The typed errors `exc` carries: itself, or every leaf of an exception group (anyio task
    groups wrap even one failure in one, nested once per group it crossed), in order.

    Empty when `exc` is not typed, or when any leaf is untyped: a bug next to a typed error is
    still a bug, and must not be answered as the typed one. Every face (CLI, REST, MCP) maps
    errors through this, so a typed error raised inside a task group reaches the user as
    itself (code, message, hint), never as a traceback or `internal`."""
    if isinstance(exc, FedError):
        return [exc]
    if not isinstance(exc, BaseExceptionGroup):
        return []
    out: list[FedError] = []
    for inner in exc.exceptions:
        found = typed_errors(inner)
        if not found:
            return []
        out.extend(found)
    return out


def typed_error(exc: BaseException) -> FedError | None:
    """The first of `typed_errors(exc)`, or None: what a face with room for one error answers."""
    found = typed_errors(exc)
    return found[0] if found else None
