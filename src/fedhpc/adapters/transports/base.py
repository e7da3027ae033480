"""The transport seam: run one Command at a site and return its CommandResult."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol, runtime_checkable

from fedhpc.adapters.command import Command, CommandResult

__all__ = [
    "LineTransport",
    "Transport",
    "TransportError",
    "TransportMisconfigured",
    "TransportUnavailable",
    "UnusableTransport",
]

from fedhpc.adapters.transport_error import TransportError
from fedhpc.errors import ErrorKind, PermanentError


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


@runtime_checkable
class LineTransport(Transport, Protocol):
    """A transport that can also hand a command's stdout on as it arrives (local, ssh).

    Contract of `run_lines`, beyond `run`'s:
    - stdout goes to `on_lines` as lists of complete lines (decoded, without their newline), a
      read's worth at a time, each awaited before more is read; it is never held whole, and the
      returned result's stdout is empty. An error raised by `on_lines` stops the command and is
      raised as is.
    - `command.timeout_s` bounds the whole call, `on_lines` included.
    - Never retried: lines already handed on cannot be taken back, so the caller, which knows
      what it kept, reads again (or not).
    Globus Compute has no such method: its result comes back from the service as one object.
    """

    async def run_lines(
        self, command: Command, on_lines: Callable[[list[str]], Awaitable[None]]
    ) -> CommandResult: ...


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
