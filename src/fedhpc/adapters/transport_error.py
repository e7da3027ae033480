"""`TransportError`, importable without the transports (which load anyio): the pure dialects
raise a subclass of it (`dialects.busy.SchedulerBusy`)."""

from __future__ import annotations

from fedhpc.errors import TransientError

__all__ = ["TransportError"]


class TransportError(TransientError):
    """The site could not be reached or the call did not finish (worth retrying)."""

    code = "transport"
