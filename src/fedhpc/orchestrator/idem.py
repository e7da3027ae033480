"""Idempotency that protects retries, not history.

A submission is the same as an earlier one when
- it carries the same `idempotency_key` (the caller's, or one a gateway made for the call and
  named in an "accepted, outcome unknown" answer): the same task or group, at any age; or
- it carries no key of the caller's own and repeats the same arguments from the same caller
  within the retry window (`FEDHPC_RETRY_WINDOW_S`, default 120 s): a retry after a lost reply.
Anything else is new work, even with identical arguments."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

from fedhpc.errors import Conflict
from fedhpc.ops.tasks import SubmitGroupRequest, SubmitTaskRequest
from fedhpc.store.tx import iso

__all__ = [
    "RETRY_WINDOW_S",
    "IdempotencyConflict",
    "dedupe_key",
    "existing_note",
    "request_digest",
    "since",
]

RETRY_WINDOW_S = 120.0

# Fields that say who asks and how to recognise a retry, not what to do.
_META = {"idempotency_key", "key_generated", "caller", "continuation"}


class IdempotencyConflict(Conflict):
    code = "idempotency_conflict"
    default_hint = (
        "An idempotency_key names one request: send the same arguments to get that task back, "
        "or use a new key for new work."
    )


def request_digest(req: SubmitTaskRequest | SubmitGroupRequest) -> str:
    """What the request asks for, without who asks or under which key."""
    body = req.model_dump_json(exclude=_META)
    return hashlib.sha256(body.encode()).hexdigest()


def dedupe_key(req: SubmitTaskRequest | SubmitGroupRequest) -> str | None:
    """The retry window's lookup key: caller and arguments. None when the caller chose its own
    key: then only that key matches."""
    if req.idempotency_key and not req.key_generated:
        return None
    kind = "group" if isinstance(req, SubmitGroupRequest) else "task"
    scope = f"{kind}\n{req.caller or ''}\n{request_digest(req)}"
    return "sha256:" + hashlib.sha256(scope.encode()).hexdigest()


def since(now: datetime, window_s: float) -> str:
    """The oldest creation time (as stored) that still counts as a retry."""
    return iso(now - timedelta(seconds=window_s))


def existing_note(
    kind: str,
    ident: str,
    created_at: datetime,
    state: str,
    *,
    by_key: bool,
    window_s: float,
    now: datetime,
) -> str:
    """The plain sentence an answer carries when a submission matched an earlier one."""
    age = max(0.0, (now - created_at).total_seconds())
    how = (
        "the same idempotency_key"
        if by_key
        else f"the same arguments from the same caller within the {window_s:g} s retry window"
    )
    return (
        f"Nothing new was submitted: this call matched {kind} {ident}, created "
        f"{created_at:%Y-%m-%d %H:%M:%S} UTC ({age:.0f} s ago) by {how}; it is {state}. "
        "For new work, pass a new idempotency_key."
    )
