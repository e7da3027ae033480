"""Run commands at a site's Globus Compute endpoint over HTTPS: submit, persist the task id, poll.

The command travels as a bash script that holds agent text only as base64 (argv line and stdin),
so neither bash quoting nor ShellFunction's `str.format` ever parses it. The script runs the
command under coreutils `timeout`, then prints each stream base64-encoded between markers: bytes
(carriage returns, invalid UTF-8) survive ShellFunction's text-mode capture, and its line cap
(`snippet_lines`) can be checked exactly. Reaching the cap raises OutputTooLarge; output is never
cut silently. The SDK is synchronous and heavy: it is imported inside functions and called in
worker threads.
"""

from __future__ import annotations

import base64
import math
import os
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, Protocol, TypeVar

import anyio
import anyio.to_thread
import structlog
from tenacity import (
    AsyncRetrying,
    RetryError,
    retry_if_exception,
    retry_if_result,
    stop_after_delay,
    wait_exponential,
)

from fedhpc.adapters.command import Command, CommandResult, quote
from fedhpc.adapters.transports.base import TransportError, TransportUnavailable
from fedhpc.adapters.transports.globus_person import person_client, person_refused
from fedhpc.adapters.transports.local import (
    DEFAULT_ATTEMPTS,
    OutputTooLarge,
    TransportTimeout,
    int_option,
    retrying,
)
from fedhpc.domain.site import TransportSpec
from fedhpc.errors import ErrorKind, FedError, PermanentError
from fedhpc.globus_auth.identity import choose_identity

__all__ = [
    "DEFAULT_SNIPPET_LINES",
    "CommandTooLarge",
    "ComputeClient",
    "GlobusComputeTransport",
    "RemoteTaskFailed",
    "build_script",
    "parse_output",
]

log = structlog.get_logger(__name__)

DEFAULT_SNIPPET_LINES = 100_000  # base64 lines of 76 chars: about 5.7 MB per stream
# The script reaches the endpoint as one `bash -c` argument: Linux caps one argument at 128 KiB.
MAX_SCRIPT_BYTES = 120_000
_B64_WIDTH = 76
_KILL_GRACE_S = 10
_BACKSTOP_S = 60  # ShellFunction's walltime, past our own `timeout`; it only stops waiting
_OUT, _ERR, _END = "@@fedhpc-gc-out", "@@fedhpc-gc-err", "@@fedhpc-gc-end"
_TIMED_OUT = 124  # coreutils timeout's status

T = TypeVar("T")


class CommandTooLarge(PermanentError):
    """The command and its stdin do not fit in one endpoint task."""

    code = "command_too_large"
    kind = ErrorKind.TOO_LARGE
    default_hint = "Stage large inputs as files at the site (Globus Transfer) and pass paths."


class RemoteTaskFailed(TransportError):
    """The endpoint reported the task as failed (worker lost, function error): no result."""

    code = "remote_task_failed"


class ComputeClient(Protocol):
    """The part of `globus_compute_sdk.Client` this transport uses (a fake may stand in)."""

    def register_function(self, function: Any) -> str: ...

    def create_batch(self) -> Any: ...

    def batch_run(self, endpoint_id: str, batch: Any) -> Mapping[str, Any]: ...

    def get_batch_result(self, task_id_list: list[str]) -> Mapping[str, Mapping[str, Any]]: ...

    def get_task(self, task_id: str) -> Mapping[str, Any]: ...


def build_script(command: Command, *, extra_env: Mapping[str, str] | None = None) -> str:
    """The bash script one task runs. Agent text appears only as base64."""
    line = Command(command.argv, env={**(extra_env or {}), **command.env}).as_shell()
    cmd_b64 = base64.b64encode(line.encode("utf-8")).decode("ascii")
    if command.stdin is None:
        feed, redirect = "", " </dev/null"
    else:
        stdin_b64 = base64.b64encode(command.stdin.encode("utf-8")).decode("ascii")
        feed, redirect = f"printf %s {quote(stdin_b64)} | base64 -d | ", ""
    timeout = max(1, math.ceil(command.timeout_s))
    return "\n".join(
        [
            "o=$(mktemp) && e=$(mktemp) || exit 125",
            f"{feed}timeout -k {_KILL_GRACE_S} {timeout} "
            f'bash -c "$(printf %s {quote(cmd_b64)} | base64 -d)" fedhpc{redirect}'
            ' >"$o" 2>"$e"',
            "rc=$?",
            f'[ "$rc" = {_TIMED_OUT} ] && echo "fedhpc: timed out after {timeout} s;'
            ' killed at the endpoint" >>"$e"',
            f'echo {_OUT}; base64 -w {_B64_WIDTH} "$o"; echo "{_END} $rc"',
            f'echo {_ERR} >&2; base64 -w {_B64_WIDTH} "$e" >&2; echo {_END} >&2',
            'rm -f "$o" "$e"',
            'exit "$rc"',
            "",
        ]
    )


def _section(text: str, mark: str) -> tuple[bytes, int | None] | None:
    lines = text.split("\n")
    if mark not in lines:
        return None
    start = len(lines) - 1 - lines[::-1].index(mark)
    body: list[str] = []
    for line in lines[start + 1 :]:
        if line.startswith(_END):
            status = line[len(_END) :].strip()
            code = int(status) if status.lstrip("-").isdigit() else None
            return base64.b64decode("".join(body)), code
        body.append(line)
    return None


def parse_output(stdout: str, stderr: str, *, snippet_lines: int) -> CommandResult:
    """Turn a ShellResult's streams back into the command's own bytes and exit status."""
    for name, text in (("stdout", stdout), ("stderr", stderr)):
        if text.count("\n") >= snippet_lines:
            raise OutputTooLarge(
                f"{name} reached snippet_lines={snippet_lines} lines at the endpoint "
                "and may be cut",
                hint="Raise the site's transport option snippet_lines, or write output to a file.",
            )
    out, err = _section(stdout, _OUT), _section(stderr, _ERR)
    if out is None or err is None or out[1] is None:
        raise TransportError("the endpoint's output lacks fedhpc's markers (script did not finish)")
    decode = partial(bytes.decode, encoding="utf-8", errors="replace")
    return CommandResult(out[1], decode(out[0]), decode(err[0]))


def _float_option(options: Mapping[str, str], key: str, default: float) -> float:
    raw = options.get(key)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise TransportUnavailable(
            f"transport option {key}={raw!r} must be a positive number",
            hint=f"Fix '{key}' in the site's [transport.options].",
        )
    return value


def _translate(exc: Exception, home: Path | None = None) -> Exception:
    """SDK errors as fedhpc errors. Messages name status codes, never request data."""
    # startup: the Globus SDKs only when a Globus site or login is used
    import globus_sdk
    from globus_compute_sdk.errors import SerdeError, TaskExecutionFailed

    from fedhpc.globus_auth.apps import translate as auth_error

    if (login := auth_error(exc, home)) is not None:
        return login  # a person must log in or consent: the hint is the exact command
    if isinstance(exc, globus_sdk.GlobusAPIError):
        what = f"Globus Compute answered HTTP {exc.http_status} ({exc.code})"
        if exc.http_status in (401, 403):
            return TransportUnavailable(
                f"{what}: the credentials were refused",
                hint="See `fedhpc login --status` (your own identity), or for a service identity "
                "check GLOBUS_COMPUTE_CLIENT_ID/SECRET; the endpoint must allow the identity.",
            )
        if exc.http_status == 429 or exc.http_status >= 500:
            return TransportError(what)
        return TransportUnavailable(what, hint="Check the site's endpoint_id and the endpoint.")
    if isinstance(exc, globus_sdk.NetworkError):
        return TransportError(f"could not reach Globus Compute: {type(exc).__name__}")
    if isinstance(exc, TaskExecutionFailed):
        summary = str(exc).strip().splitlines()[-1:] or ["no detail"]
        return RemoteTaskFailed(f"the task failed at the endpoint: {summary[0][:300]}")
    if isinstance(exc, SerdeError):
        return TransportError(f"the endpoint's result could not be read: {type(exc).__name__}")
    return exc


_shared_lock = threading.Lock()
# Registered ShellFunction ids per client and (snippet_lines, walltime): once per process.
_functions: weakref.WeakKeyDictionary[Any, dict[tuple[int, int], str]] = weakref.WeakKeyDictionary()


class GlobusComputeTransport:
    """Runs commands as ShellFunction tasks on one Globus Compute endpoint, polling over HTTPS."""

    def __init__(
        self,
        spec: TransportSpec,
        *,
        state_dir: Path,
        name: str | None = None,
        client: ComputeClient | None = None,
        on_submitted: Callable[[str], Awaitable[None]] | None = None,
        per_person: bool = False,
    ) -> None:
        if not spec.endpoint_id:
            raise TransportUnavailable(
                "a globus-compute transport needs an endpoint_id",
                hint="Set endpoint_id in the site's [transport] (or your user config).",
            )
        if client is None:
            # Which identity (the person's `fedhpc login`, or client credentials) is decided
            # per call: a login made after the daemon started is used without a restart.
            choose_identity("compute", os.environ)
        # Service mode, `identity = "person"`: a command issued for a person (`acting_for`)
        # runs with that person's own Globus Compute token; the rest (probes) as the service.
        self.per_person = per_person
        self.name = name or f"globus-compute:{spec.endpoint_id}"
        self.endpoint_id = spec.endpoint_id
        self.state_dir = state_dir
        self._client = client
        self._on_submitted = on_submitted
        self._env = dict(spec.env)
        opts = spec.options
        self.snippet_lines = int_option(opts, "snippet_lines", DEFAULT_SNIPPET_LINES, minimum=10)
        self._attempts = int_option(opts, "attempts", DEFAULT_ATTEMPTS)
        self._queue_timeout_s = _float_option(opts, "queue_timeout_s", 600.0)
        self._poll_min_s = _float_option(opts, "poll_min_s", 0.5)
        self._poll_max_s = _float_option(opts, "poll_max_s", 10.0)
        self._limiter: anyio.CapacityLimiter | None = None

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(4)
        try:
            return await anyio.to_thread.run_sync(partial(fn, *args), limiter=self._limiter)
        except FedError:
            raise
        except Exception as exc:
            refused = await person_refused(exc, self.name) if self.per_person else None
            if refused is not None:
                raise refused from None
            translated = _translate(exc, self.state_dir)
            if translated is exc:
                raise
            raise translated from None  # SDK exceptions carry request data; keep them out

    def _get_client(self) -> ComputeClient:
        mine: ComputeClient | None = person_client(self.name) if self.per_person else None
        if mine is not None:
            return mine
        if self._client is not None:
            return self._client
        # startup: the Globus SDKs only when a Globus site or login is used
        from fedhpc.globus_auth.apps import compute_client

        # One SDK client per process and identity (cached there); never a login prompt.
        client: ComputeClient = compute_client(self.state_dir)
        return client

    def _function_id(self, client: ComputeClient, walltime: int) -> str:
        # startup: the Globus SDKs only when a Globus site or login is used
        from globus_compute_sdk import ShellFunction

        key = (self.snippet_lines, walltime)
        with _shared_lock:
            known = _functions.setdefault(client, {})
            if key not in known:
                # The template is only "{cmd}": the script arrives as a kwarg, which str.format
                # substitutes verbatim, so no text of ours or the agent's is ever format-parsed.
                fn = ShellFunction("{cmd}", walltime=walltime, snippet_lines=self.snippet_lines)
                known[key] = client.register_function(fn)
            return known[key]

    def _submit_sync(self, script: str, walltime: int) -> str:
        client = self._get_client()
        function_id = self._function_id(client, walltime)
        batch = client.create_batch()
        batch.add(function_id, args=(), kwargs={"cmd": script})
        response = client.batch_run(self.endpoint_id, batch)
        task_ids: Sequence[str] = response["tasks"][function_id]
        if len(task_ids) != 1:
            raise TransportError(f"Globus Compute returned {len(task_ids)} task ids for one task")
        return str(task_ids[0])

    async def submit(self, command: Command) -> str:
        """Send the command to the endpoint; the task id is what to persist."""
        script = build_script(command, extra_env=self._env)
        if len(script.encode("utf-8")) > MAX_SCRIPT_BYTES:
            raise CommandTooLarge(
                f"the command and its stdin encode to more than {MAX_SCRIPT_BYTES} bytes"
            )
        walltime = math.ceil(command.timeout_s) + _KILL_GRACE_S + _BACKSTOP_S
        task_id = await self._call(self._submit_sync, script, walltime)
        log.info("transport.globus_compute.submitted", site=self.name, task_id=task_id)
        return task_id

    def _result_sync(self, task_id: str) -> Mapping[str, Any] | None:
        client = self._get_client()
        status = client.get_batch_result([task_id]).get(task_id)
        if status is None:
            # The SDK drops a task it could not unpack (a failed task) from batch results;
            # asking for that one task raises the endpoint's error instead.
            status = client.get_task(task_id)
        return None if status.get("pending", True) else status

    async def result(self, task_id: str) -> CommandResult | None:
        """The finished task's result, or None while it is pending. Works after a restart."""
        status = await self._call(self._result_sync, task_id)
        if status is None:
            return None
        if "result" not in status:
            reason = status.get("reason", status.get("status", "unknown"))
            raise RemoteTaskFailed(f"task {task_id} finished without a result: {reason}")
        shell = status["result"]
        if isinstance(shell, Mapping):
            stdout, stderr = str(shell["stdout"]), str(shell["stderr"])
        else:
            stdout, stderr = str(shell.stdout), str(shell.stderr)
        return parse_output(stdout, stderr, snippet_lines=self.snippet_lines)

    async def wait(self, task_id: str, *, timeout_s: float) -> CommandResult:
        """Poll `result` with backoff until the task finishes; TransportTimeout past timeout_s."""
        poll = AsyncRetrying(
            stop=stop_after_delay(timeout_s),
            wait=wait_exponential(multiplier=self._poll_min_s, max=self._poll_max_s),
            retry=retry_if_result(lambda r: r is None)
            | retry_if_exception(
                lambda e: isinstance(e, TransportError) and not isinstance(e, RemoteTaskFailed)
            ),
            reraise=False,
        )
        try:
            result: CommandResult | None = await poll(self.result, task_id)
        except RetryError as exc:
            last = exc.last_attempt.exception() if exc.last_attempt.failed else None
            raise TransportTimeout(
                f"task {task_id} did not finish within {timeout_s:g} s"
                + (f" (last error: {getattr(last, 'message', last)})" if last else ""),
                hint="The task id stays valid: ask for its result again later.",
            ) from None
        assert result is not None
        return result

    async def run(
        self, command: Command, *, on_submitted: Callable[[str], Awaitable[None]] | None = None
    ) -> CommandResult:
        hook = on_submitted or self._on_submitted

        async def once(cmd: Command) -> CommandResult:
            started = time.monotonic()
            task_id = await self.submit(cmd)
            if hook is not None:
                await hook(task_id)  # persisted before we wait, so a restart can find it
            result = await self.wait(task_id, timeout_s=cmd.timeout_s + self._queue_timeout_s)
            return replace(result, duration_s=time.monotonic() - started)

        return await retrying(command, once, attempts=self._attempts)

    async def aclose(self) -> None:
        return None
