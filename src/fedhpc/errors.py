"""One error root and a small taxonomy; every error carries a stable code and a hint."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

__all__ = [
    "FedError",
    "FieldIssue",
    "PermanentError",
    "ProfileError",
    "TransientError",
    "UsageError",
    "ValidationFailed",
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


class FedError(Exception):
    """Root of every error fedhpc raises on purpose; `code` is stable, `hint` says how to fix it."""

    code: ClassVar[str] = "error"
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


class ValidationFailed(FedError):
    """Input failed validation; `issues` names every offending field."""

    code = "validation"
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

    def __init__(self, path: str, key: str, reason: str) -> None:
        self.path = path
        self.key = key
        self.reason = reason
        # The message already says where and what; a hint line would only repeat it.
        super().__init__(f"{path}: {key}: {reason}", hint="")


class TransientError(FedError):
    """Worth retrying: the site or service may answer next time (timeouts, connection loss)."""

    code = "transient"
    default_hint = "Retry later; fedhpc retries this itself within its budget."


class PermanentError(FedError):
    """Retrying the same call fails the same way (rejected by the scheduler, bad credentials)."""

    code = "permanent"
