"""Run commands on this machine; also the bounded-process and retry helpers all transports share."""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import structlog
from anyio.abc import ByteReceiveStream
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from fedhpc.adapters.command import Command, CommandResult
from fedhpc.adapters.transports.base import TransportError, TransportUnavailable
from fedhpc.adapters.transports.process import spawn
from fedhpc.domain.site import TransportSpec
from fedhpc.errors import PermanentError

__all__ = [
    "DEFAULT_ATTEMPTS",
    "DEFAULT_LINE_LIMIT",
    "DEFAULT_OUTPUT_LIMIT",
    "LocalTransport",
    "OnLines",
    "OutputTooLarge",
    "ProcessOutcome",
    "TransportTimeout",
    "int_option",
    "retrying",
    "run_bounded",
    "stream_bounded",
]

log = structlog.get_logger(__name__)

DEFAULT_OUTPUT_LIMIT = 64 * 1024 * 1024  # bytes per stream
DEFAULT_LINE_LIMIT = 1024 * 1024  # bytes of one stdout line when it is read as a stream
DEFAULT_ATTEMPTS = 3

T = TypeVar("T")
OnLines = Callable[[list[str]], Awaitable[None]]


class TransportTimeout(TransportError):
    """The command ran past `timeout_s` and was killed; never retried (the bound is the call's)."""

    code = "transport_timeout"
    default_hint = "Raise the command's timeout_s, or make the command finish sooner."


class OutputTooLarge(PermanentError):
    """A stream exceeded the transport's output bound; output is never cut silently."""

    code = "output_too_large"
    default_hint = "Write large output to a file at the site and read it in pieces."


@dataclass(frozen=True, slots=True)
class ProcessOutcome:
    """Raw result of one local process: exit status and both streams as bytes."""

    returncode: int
    stdout: bytes
    stderr: bytes
    duration_s: float

    def as_result(self) -> CommandResult:
        return CommandResult(
            returncode=self.returncode,
            stdout=self.stdout.decode("utf-8", errors="replace"),
            stderr=self.stderr.decode("utf-8", errors="replace"),
            duration_s=self.duration_s,
        )


def int_option(options: Mapping[str, str], key: str, default: int, *, minimum: int = 1) -> int:
    """An integer transport option, rejected loudly when it is not one."""
    raw = options.get(key)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise TransportUnavailable(
            f"transport option {key}={raw!r} must be an integer >= {minimum}",
            hint=f"Fix '{key}' in the site's [transport.options].",
        )
    return value


def _retryable(exc: BaseException) -> bool:
    # A timeout already spent the call's whole budget: retrying it would multiply the bound.
    return isinstance(exc, TransportError) and not isinstance(exc, TransportTimeout)


def _log_retry(state: RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome else None
    log.warning(
        "transport.retry",
        attempt=state.attempt_number,
        error=getattr(exc, "code", type(exc).__name__),
        message=getattr(exc, "message", ""),
    )


async def retrying(
    command: Command, call: Callable[[Command], Awaitable[T]], *, attempts: int
) -> T:
    """The one retry rule: TransportError except timeouts, idempotent commands only."""
    policy = AsyncRetrying(
        stop=stop_after_attempt(attempts if command.idempotent else 1),
        wait=wait_exponential(multiplier=0.2, min=0.2, max=2.0),
        retry=retry_if_exception(_retryable),
        before_sleep=_log_retry,
        reraise=True,
    )
    return await policy(call, command)


async def _drain(
    stream: ByteReceiveStream,
    sink: bytearray,
    limit: int,
    overflow: list[str],
    stop: anyio.CancelScope,
) -> None:
    async for chunk in stream:
        if len(sink) + len(chunk) > limit:
            overflow.append(f"more than {limit} bytes to one stream")
            stop.cancel()
            return
        sink.extend(chunk)


class _LineCutter:
    """Hands a byte stream on as lists of complete lines (decoded, without their newline), one
    chunk's worth at a time: only the chunk and an unfinished line are ever held."""

    def __init__(self, deliver: OnLines, line_limit: int) -> None:
        self.deliver = deliver
        self.line_limit = line_limit
        self.tail = b""
        self.failed: BaseException | None = None  # the caller's own error, raised as is

    async def drain(
        self, stream: ByteReceiveStream, overflow: list[str], stop: anyio.CancelScope
    ) -> None:
        try:
            async for chunk in stream:
                head, sep, self.tail = (self.tail + chunk).rpartition(b"\n")
                if len(self.tail) > self.line_limit:
                    overflow.append(f"a line longer than {self.line_limit} bytes")
                    break
                if sep:
                    await self.deliver(head.decode("utf-8", errors="replace").split("\n"))
            else:
                if self.tail:  # a last line without its newline
                    await self.deliver([self.tail.decode("utf-8", errors="replace")])
                return
        except Exception as exc:
            self.failed = exc
        stop.cancel()


async def run_bounded(
    argv: Sequence[str],
    *,
    stdin: bytes | None,
    env: Mapping[str, str] | None,
    timeout_s: float,
    output_limit: int = DEFAULT_OUTPUT_LIMIT,
) -> ProcessOutcome:
    """Run argv (never through a shell) in its own process group; kill the group on timeout,
    cancellation or overflow. Raises TransportTimeout or OutputTooLarge."""
    out = bytearray()

    async def collect(
        stream: ByteReceiveStream, overflow: list[str], stop: anyio.CancelScope
    ) -> None:
        await _drain(stream, out, output_limit, overflow, stop)

    return await _bounded(
        argv,
        stdin=stdin,
        env=env,
        timeout_s=timeout_s,
        output_limit=output_limit,
        read_stdout=collect,
        stdout=lambda: bytes(out),
    )


async def stream_bounded(
    argv: Sequence[str],
    *,
    stdin: bytes | None,
    env: Mapping[str, str] | None,
    timeout_s: float,
    on_lines: OnLines,
    line_limit: int = DEFAULT_LINE_LIMIT,
    output_limit: int = DEFAULT_OUTPUT_LIMIT,
) -> ProcessOutcome:
    """`run_bounded` with stdout handed to `on_lines` as it arrives, a chunk's complete lines at a
    time, and never held whole (the outcome's stdout is empty). `on_lines` is awaited before more
    is read, within `timeout_s`; its own error kills the process and is raised as is. A line
    longer than `line_limit` bytes raises OutputTooLarge; stderr is bounded by `output_limit`."""
    cutter = _LineCutter(on_lines, line_limit)
    outcome = await _bounded(
        argv,
        stdin=stdin,
        env=env,
        timeout_s=timeout_s,
        output_limit=output_limit,
        read_stdout=cutter.drain,
        stdout=bytes,
    )
    if cutter.failed is not None:
        raise cutter.failed
    return outcome


async def _bounded(
    argv: Sequence[str],
    *,
    stdin: bytes | None,
    env: Mapping[str, str] | None,
    timeout_s: float,
    output_limit: int,
    read_stdout: Callable[
        [ByteReceiveStream, list[str], anyio.CancelScope], Coroutine[Any, Any, None]
    ],
    stdout: Callable[[], bytes],
) -> ProcessOutcome:
    started = time.monotonic()
    err = bytearray()
    overflow: list[str] = []
    async with await spawn(argv, feed=stdin is not None, env=env) as child:
        try:
            with anyio.fail_after(timeout_s):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(read_stdout, child.stdout, overflow, tg.cancel_scope)
                    tg.start_soon(
                        _drain, child.stderr, err, output_limit, overflow, tg.cancel_scope
                    )
                    if stdin is not None:
                        tg.start_soon(child.feed, stdin)
                if not overflow and not tg.cancel_scope.cancel_called:
                    await child.wait()
        except TimeoutError:
            raise TransportTimeout(
                f"{argv[0]} did not finish within {timeout_s:g} s and was killed"
            ) from None
        # Leaving `child` kills its group unless it ended, reaps it and closes its fds.
    if overflow:
        raise OutputTooLarge(f"{argv[0]} wrote {overflow[0]}")
    assert child.returncode is not None
    return ProcessOutcome(child.returncode, stdout(), bytes(err), time.monotonic() - started)


class LocalTransport:
    """Runs commands as local processes with argv exactly as given (the devfed sites use it)."""

    def __init__(
        self,
        spec: TransportSpec | None = None,
        *,
        name: str = "local",
        attempts: int | None = None,
        output_limit: int | None = None,
    ) -> None:
        spec = spec or TransportSpec(kind="local")
        self.name = name
        self._env = dict(spec.env)
        self._attempts = attempts or int_option(spec.options, "attempts", DEFAULT_ATTEMPTS)
        self._output_limit = output_limit or int_option(
            spec.options, "output_limit_bytes", DEFAULT_OUTPUT_LIMIT
        )

    async def run(self, command: Command) -> CommandResult:
        return await retrying(command, self._run_once, attempts=self._attempts)

    async def run_lines(self, command: Command, on_lines: OnLines) -> CommandResult:
        return await self._run_once(command, on_lines)  # never retried: see LineTransport

    async def _run_once(self, command: Command, on_lines: OnLines | None = None) -> CommandResult:
        env = {**os.environ, **self._env, **command.env}
        stdin = command.stdin.encode("utf-8") if command.stdin is not None else None
        try:
            if on_lines is None:
                outcome = await run_bounded(
                    command.argv,
                    stdin=stdin,
                    env=env,
                    timeout_s=command.timeout_s,
                    output_limit=self._output_limit,
                )
            else:
                outcome = await stream_bounded(
                    command.argv,
                    stdin=stdin,
                    env=env,
                    timeout_s=command.timeout_s,
                    on_lines=on_lines,
                    output_limit=self._output_limit,
                )
        except FileNotFoundError:
            # Same answer a remote shell gives, so callers see one behaviour across transports.
            return CommandResult(127, "", f"fedhpc: {command.argv[0]}: command not found\n")
        except PermissionError:
            return CommandResult(126, "", f"fedhpc: {command.argv[0]}: permission denied\n")
        except OSError as exc:
            raise TransportError(f"could not start {command.argv[0]}: {exc.strerror}") from None
        log.debug("transport.local.ran", argv0=command.argv[0], rc=outcome.returncode)
        return outcome.as_result()

    async def aclose(self) -> None:
        return None
