"""The transport seam: run one Command at a site and return its CommandResult."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from fedhpc.adapters.command import Command, CommandResult

__all__ = [
    "Transport",
    "TransportError",
    "TransportMisconfigured",
    "TransportUnavailable",
    "UnusableTransport",
]

from fedhpc.errors import ErrorKind, PermanentError, TransientError


class TransportError(TransientError):
    """The site could not be reached or the call did not finish (worth retrying)."""

    code = "transport"


class TransportUnavailable(PermanentError):
    """The transport cannot work as configured (missing binary, credentials, endpoint)."""

    code = "transport_unavailable"
    kind = ErrorKind.UNAVAILABLE


class TransportMisconfigured(TransportUnavailable):
    """A site's [transport] settings are wrong (a refused or unknown ssh option): the fix is in
    the config, not a retry."""

    code = "transport_config"
    kind = ErrorKind.VALIDATION


@runtime_checkable
class Transport(Protocol):
    """Runs commands at one site.

    Contract:
    - `run` executes `command.argv` exactly (no shell re-parsing of agent-supplied text), feeds
      `command.stdin`, applies `command.env`, and returns the exit status with both streams.
    - A non-zero exit status is a normal result, not an exception.
    - `TransportError` means the command may not have run or its result was lost; the transport
      retries it itself first, but only when `command.idempotent` is true.
    - `command.timeout_s` bounds the call. Local and ssh raise `TransportTimeout` (a
      `TransportError`, never retried: a retry would multiply the caller's bound). Globus
      Compute enforces it at the endpoint with coreutils `timeout`, so the command comes back
      as a result with exit status 124 and a "timed out" line on stderr; its task id stays
      recoverable after a restart. Callers treat exit status 124 as a timeout on every
      transport.
    """

    name: str

    async def run(self, command: Command) -> CommandResult: ...

    async def aclose(self) -> None: ...


class UnusableTransport:
    """Stands for a transport that could not be built from its settings: every call raises the
    error that said why. The daemon keeps serving the other sites, and this site shows offline
    with that error (its hint included) until the config is fixed."""

    def __init__(self, error: TransportUnavailable, *, name: str) -> None:
        self.name = name
        self.error = error

    async def run(self, command: Command) -> CommandResult:
        raise self.error.with_traceback(None)  # one instance, raised again and again

    async def aclose(self) -> None:
        return None
