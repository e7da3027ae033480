"""GlobusComputeTransport offline: a process-pool fake of the service, and the real SDK Client
against `globus_sdk.testing` registered responses."""

from __future__ import annotations

import base64
import concurrent.futures as cf
import json
import logging
import multiprocessing
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import globus_sdk
import pytest
import responses
import structlog
from globus_compute_sdk import Client, ShellFunction
from globus_compute_sdk.errors import TaskExecutionFailed
from globus_compute_sdk.sdk.batch import Batch, create_user_runtime
from globus_compute_sdk.sdk.client import FunctionRegistrationData
from globus_compute_sdk.sdk.shell_function import ShellResult
from globus_compute_sdk.serialize import ComputeSerializer
from globus_sdk.testing import RegisteredResponse, load_response

from fedhpc.adapters.command import Command
from fedhpc.adapters.transports import make_transport
from fedhpc.adapters.transports.base import TransportUnavailable
from fedhpc.adapters.transports.globus_compute import (
    CommandTooLarge,
    ComputeClient,
    GlobusComputeTransport,
)
from fedhpc.adapters.transports.local import OutputTooLarge
from fedhpc.domain.site import TransportSpec
from fedhpc.errors import FedError
from fedhpc.globus_auth import apps as auth_apps
from tests.injection_corpus import CANARY_NAME, corpus
from tests.unit.globus_requests import json_body, last_request

ENDPOINT = "4b116d3c-1703-4f8f-9f6f-39921e5864df"
FAST = {"poll_min_s": "0.05", "poll_max_s": "0.2", "queue_timeout_s": "60"}
BRACES = ["{cmd}", "{0}", "{}", "{{", "}}", "{cmd!r:>99}", "{__class__.__mro__}", "}{"]


# --- a fake Globus Compute service: the SDK's Client surface, tasks run in a process pool ------


def _enter_sandbox(sandbox: str) -> None:
    os.environ["GC_TASK_SANDBOX_DIR"] = sandbox  # an endpoint sets this for every task


def _endpoint_execute(function_code: str, payload: str) -> str:
    """What an endpoint worker does: unpack function and arguments, run, serialize the result."""
    serde = ComputeSerializer()
    function = serde.deserialize(serde.unpack_buffers(function_code)[0])
    ser_args, ser_kwargs = serde.unpack_buffers(payload)
    result = function(*serde.deserialize(ser_args), **serde.deserialize(ser_kwargs))
    return serde.serialize(result)


class LocalComputeService:
    """Honours register_function / create_batch / batch_run / get_batch_result / get_task.

    Functions and arguments cross a real ComputeSerializer both ways, as they do through the
    web service; ShellFunction runs for real in a worker process with GC_TASK_SANDBOX_DIR set."""

    def __init__(self, sandbox: Path) -> None:
        self._serde = ComputeSerializer()
        self._pool = cf.ProcessPoolExecutor(
            2,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_enter_sandbox,
            initargs=(str(sandbox),),
        )
        self.functions: dict[str, str] = {}
        self.registered: list[ShellFunction] = []
        self._tasks: dict[str, cf.Future[str]] = {}

    def register_function(self, function: Any) -> str:
        registration = FunctionRegistrationData(function=function, serializer=self._serde)
        data = registration.to_dict()  # type: ignore[no-untyped-call]  # the SDK leaves it unannotated
        function_id = str(uuid.uuid4())
        self.functions[function_id] = data["function_code"]
        self.registered.append(function)
        return function_id

    def create_batch(self) -> Batch:
        return Batch(None, serializer=self._serde, user_runtime=create_user_runtime())

    def batch_run(self, endpoint_id: str, batch: Batch) -> dict[str, Any]:
        wire = json.loads(json.dumps(batch.prepare()))  # what would be POSTed
        tasks: dict[str, list[str]] = {}
        for function_id, payloads in wire["tasks"].items():
            for payload in payloads:
                task_id = str(uuid.uuid4())
                code = self.functions[function_id]
                self._tasks[task_id] = self._pool.submit(_endpoint_execute, code, payload)
                tasks.setdefault(function_id, []).append(task_id)
        return {"tasks": tasks, "task_group_id": str(uuid.uuid4()), "endpoint_id": endpoint_id}

    def _status(self, task_id: str) -> dict[str, Any]:
        future = self._tasks[task_id]
        if not future.done():
            return {"pending": True, "status": "waiting-for-ep"}
        if future.exception() is not None:
            raise TaskExecutionFailed(repr(future.exception()), "0")
        result = self._serde.deserialize(future.result())
        return {"pending": False, "status": "success", "result": result, "completion_t": "0"}

    def get_batch_result(self, task_id_list: list[str]) -> dict[str, dict[str, Any]]:
        out = {}
        for task_id in task_id_list:
            try:
                out[task_id] = self._status(task_id)
            except TaskExecutionFailed:
                continue  # the real Client drops tasks it cannot unpack, too
        return out

    def get_task(self, task_id: str) -> dict[str, Any]:
        return self._status(task_id)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalComputeService]:
    fake = LocalComputeService(tmp_path_factory.mktemp("gc-sandbox"))
    yield fake
    fake.shutdown()


def _spec(**options: str) -> TransportSpec:
    return TransportSpec(
        kind="globus-compute",
        endpoint_id=ENDPOINT,
        env={"FEDHPC_SITE_VAR": "from-spec"},
        options={**FAST, **options},
    )


def _transport(service: ComputeClient, tmp_path: Path, **options: str) -> GlobusComputeTransport:
    return GlobusComputeTransport(_spec(**options), state_dir=tmp_path, client=service)


# --- behaviour through the process-pool service -------------------------------------------------


async def test_a_command_runs_at_the_endpoint_and_returns_its_output(
    service: LocalComputeService, tmp_path: Path
) -> None:
    transport = _transport(service, tmp_path)
    cmd = Command(
        ("sh", "-c", 'printf "%s %s" "$FEDHPC_SITE_VAR" "$1"; cat', "sh", "arg"), stdin="in"
    )
    with anyio.fail_after(60):
        result = await transport.run(cmd)
    assert (result.returncode, result.stdout, result.stderr) == (0, "from-spec argin", "")
    assert service.registered[-1].snippet_lines == 100_000


async def test_non_zero_exit_is_a_result_with_both_streams(
    service: LocalComputeService, tmp_path: Path
) -> None:
    with anyio.fail_after(60):
        result = await _transport(service, tmp_path).run(
            Command(("sh", "-c", "echo out; echo err >&2; exit 3"))
        )
    assert (result.returncode, result.stdout, result.stderr) == (3, "out\n", "err\n")


async def test_walltime_kills_the_command_and_reports_rc_124(
    service: LocalComputeService, tmp_path: Path
) -> None:
    with anyio.fail_after(25):  # well before the 30 s sleep: the 1 s limit ended it
        result = await _transport(service, tmp_path).run(
            Command(("sh", "-c", "echo started; sleep 30"), timeout_s=1)
        )
    assert result.returncode == 124
    assert result.stdout == "started\n"
    assert "timed out after 1 s" in result.stderr


async def test_output_beyond_the_sdk_default_of_1000_lines_comes_back_whole(
    service: LocalComputeService, tmp_path: Path
) -> None:
    with anyio.fail_after(120):
        result = await _transport(service, tmp_path).run(Command(("seq", "1", "200000")))
    lines = result.stdout.splitlines()
    assert len(lines) == 200_000
    assert (lines[0], lines[-1]) == ("1", "200000")


async def test_reaching_snippet_lines_raises_output_too_large(
    service: LocalComputeService, tmp_path: Path
) -> None:
    transport = _transport(service, tmp_path, snippet_lines="10")
    with anyio.fail_after(60), pytest.raises(OutputTooLarge) as caught:
        await transport.run(Command(("seq", "1", "5000")))
    assert caught.value.code == "output_too_large"
    assert "snippet_lines=10" in caught.value.message


async def test_a_persisted_task_id_is_found_by_a_new_transport_after_restart(
    service: LocalComputeService, tmp_path: Path
) -> None:
    store = tmp_path / "task-id"

    async def persist(task_id: str) -> None:
        store.write_text(task_id)

    before = _transport(service, tmp_path)
    with anyio.fail_after(60):
        task_id = await before.submit(Command(("echo", "survives restarts")))
        await persist(task_id)
        del before
        after = _transport(service, tmp_path)  # a new daemon: nothing in memory
        result = await after.wait(store.read_text(), timeout_s=50)
    assert result.stdout == "survives restarts\n"


async def test_run_hands_the_task_id_to_on_submitted_before_waiting(
    service: LocalComputeService, tmp_path: Path
) -> None:
    seen: list[str] = []

    async def persist(task_id: str) -> None:
        seen.append(task_id)

    with anyio.fail_after(60):
        result = await _transport(service, tmp_path).run(
            Command(("echo", "hooked")), on_submitted=persist
        )
        assert len(seen) == 1
        again = await _transport(service, tmp_path).result(seen[0])
    assert again is not None
    assert again.stdout == result.stdout == "hooked\n"


async def test_injection_corpus_and_braces_round_trip_unexecuted(
    service: LocalComputeService, tmp_path: Path, canary_dir: Path
) -> None:
    strings = [*corpus(canary_dir), *BRACES]
    transport = _transport(service, tmp_path)
    with anyio.fail_after(120):
        as_argv = await transport.run(Command(("printf", "%s\n", *strings)))
        assert as_argv.stdout == "".join(f"{s}\n" for s in strings)
        for s in strings:
            via_env = await transport.run(
                Command(("sh", "-c", 'printf "%s" "$EVIL"'), env={"EVIL": s})
            )
            assert via_env.stdout == s
            via_stdin = await transport.run(Command(("cat",), stdin=s))
            assert via_stdin.stdout == s
    assert not (canary_dir / CANARY_NAME).exists()


async def test_a_command_too_large_for_one_task_is_refused_before_submission(
    service: LocalComputeService, tmp_path: Path
) -> None:
    with pytest.raises(CommandTooLarge) as caught:
        await _transport(service, tmp_path).submit(Command(("cat",), stdin="x" * 200_000))
    assert caught.value.code == "command_too_large"


# --- credentials ------------------------------------------------------------------------------


async def test_without_a_login_or_service_identity_the_first_call_names_fedhpc_login(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, mocked_globus: None
) -> None:
    monkeypatch.delenv("GLOBUS_COMPUTE_CLIENT_ID", raising=False)
    monkeypatch.delenv("GLOBUS_COMPUTE_CLIENT_SECRET", raising=False)
    monkeypatch.delenv("FEDHPC_GLOBUS_IDENTITY", raising=False)
    auth_apps.reset()
    transport = make_transport(_spec(), state_dir=tmp_path)  # a later login needs no restart
    with pytest.raises(FedError) as caught:
        await transport.run(Command(("true",)))
    assert caught.value.code == "globus_login_required"
    assert "`fedhpc login`" in caught.value.hint
    assert not responses.calls  # nothing sent, nothing read from stdin


@pytest.fixture
def mocked_globus() -> Iterator[None]:
    responses.start()
    try:
        yield
    finally:
        responses.stop()
        responses.reset()


async def test_a_secret_in_the_environment_never_reaches_logs_or_errors(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    mocked_globus: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = "canary-secret-" + uuid.uuid4().hex
    client_id = str(uuid.uuid4())
    monkeypatch.setenv("GLOBUS_COMPUTE_CLIENT_ID", client_id)
    monkeypatch.setenv("GLOBUS_COMPUTE_CLIENT_SECRET", secret)
    monkeypatch.setenv("GLOBUS_COMPUTE_USER_DIR", str(tmp_path / "gc-user"))
    auth_apps.reset()  # build a fresh SDK client from the environment
    load_response(
        RegisteredResponse(
            service="auth",
            path="/v2/oauth2/token",
            method="POST",
            status=401,
            json={"error": "invalid_client"},
        )
    )
    transport = make_transport(_spec(), state_dir=tmp_path)
    caplog.set_level(logging.DEBUG)
    with structlog.testing.capture_logs() as logs, pytest.raises(TransportUnavailable) as caught:
        await transport.run(Command(("true",)))
    basic = base64.b64encode(f"{client_id}:{secret}".encode()).decode()
    exc: BaseException | None = caught.value
    texts = [repr(logs), caplog.text]
    while exc is not None:  # the whole chain, in case something re-raises with context
        texts += [str(exc), repr(exc), json.dumps(getattr(exc, "as_dict", dict)())]
        exc = exc.__cause__ or exc.__context__
    for text in texts:
        assert secret not in text
        assert basic not in text
    assert "credentials were refused" in caught.value.message


# --- the real SDK Client against registered responses ----------------------------------------


def _run_like_an_endpoint(script: str, cwd: Path) -> ShellResult:
    proc = subprocess.run(
        ["/bin/bash", "-c", script], capture_output=True, text=True, cwd=cwd, check=False
    )
    return ShellResult(script, proc.stdout, proc.stderr, proc.returncode)


async def test_submit_then_pending_then_completed_through_the_real_sdk_client(
    mocked_globus: None, tmp_path: Path
) -> None:
    function_id = load_response("compute.v3.register_function").metadata["function_id"]
    task_id = str(uuid.uuid4())
    load_response(
        RegisteredResponse(
            service="compute",
            path=f"/v3/endpoints/{ENDPOINT}/submit",
            method="POST",
            json={
                "request_id": str(uuid.uuid4()),
                "task_group_id": str(uuid.uuid4()),
                "endpoint_id": ENDPOINT,
                "tasks": {function_id: [task_id]},
            },
        )
    )
    client = Client(authorizer=globus_sdk.NullAuthorizer(), do_version_check=False)
    transport = GlobusComputeTransport(_spec(), state_dir=tmp_path, client=client)

    with anyio.fail_after(30):
        assert await transport.submit(Command(("echo", "{via} the SDK"))) == task_id

    # What went over the wire: the script, carrying the command only as base64.
    serde = ComputeSerializer()
    payload = json_body(last_request())["tasks"][function_id][0]
    kwargs = serde.deserialize(serde.unpack_buffers(payload)[1])
    assert "the SDK" not in kwargs["cmd"]
    shell = _run_like_an_endpoint(kwargs["cmd"], tmp_path)

    batch_status = "/v2/batch_status"
    pending = {"task_id": task_id, "status": "waiting-for-ep"}
    done = {
        "task_id": task_id,
        "status": "success",
        "result": serde.serialize(shell),
        "completion_t": "1700000000.0",
    }
    for doc in (pending, done):
        load_response(
            RegisteredResponse(
                service="compute",
                path=batch_status,
                method="POST",
                json={"response": "batch", "results": {task_id: doc}},
            )
        )
    with anyio.fail_after(30):
        assert await transport.result(task_id) is None
        result = await transport.result(task_id)
    assert result is not None
    assert (result.returncode, result.stdout) == (0, "{via} the SDK\n")
    assert json_body(last_request()) == {"task_ids": [task_id]}


# --- import cost ---------------------------------------------------------------------------------


def test_importing_the_transports_does_not_load_the_globus_sdks() -> None:
    code = (
        "import sys, fedhpc.adapters.transports\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('globus_sdk', 'globus_compute_sdk')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
