"""What a call to the daemon raises when the daemon cannot answer: it is not there, it was too
slow for a read, or a change's (a submission's) answer was lost."""

from __future__ import annotations

from typing import Any

from fedhpc.errors import TransientError

__all__ = ["AcceptedUnknown", "DaemonTimeout", "DaemonUnavailable", "OutcomeUnknown"]


class DaemonUnavailable(TransientError):
    """Nothing answers on the daemon's socket."""

    code = "daemon_unavailable"
    default_hint = "Start it with `fedhpc daemon`, or let `fedhpc serve` start it."


class DaemonTimeout(TransientError):
    """A read got no answer in time: nothing was changed."""

    code = "daemon_timeout"
    default_hint = "The daemon is busy; nothing was changed. Ask again in a moment."


class OutcomeUnknown(TransientError):
    """A change was sent but its answer was lost: it may or may not have taken effect."""

    code = "outcome_unknown"


class AcceptedUnknown(TransientError):
    """A submission was sent but its answer was lost: it may have been accepted. Retrying with
    the same idempotency key returns what was accepted, or submits it once if nothing was."""

    code = "accepted_unknown"

    def __init__(self, message: str, *, idempotency_key: str, tool: str) -> None:
        super().__init__(
            message,
            hint=(
                f"Call {tool} again with the same arguments and "
                f'idempotency_key="{idempotency_key}": it returns what the first call started, '
                "or submits it once if nothing was. Without that key a retry may run it twice."
            ),
        )
        self.idempotency_key = idempotency_key

    def as_dict(self) -> dict[str, Any]:
        return {**super().as_dict(), "idempotency_key": self.idempotency_key}
