"""The daemon on a person's `fedhpc login` tokens, offline (fake Globus Auth on `responses`):
Compute and Transfer both send the stored tokens, refresh them and persist the rotated refresh
token; nothing ever prompts; missing consents and revoked logins are typed errors whose hint is
the exact command; no token reaches logs, events, payloads or answers (canary)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import anyio
import globus_sdk
import pytest
import responses
import structlog
from globus_sdk.testing import RegisteredResponse, load_response

from fedhpc.adapters.command import Command
from fedhpc.adapters.transports.globus_compute import GlobusComputeTransport
from fedhpc.bridge.payload import build_payload
from fedhpc.domain.config import Site, UserSiteConfig
from fedhpc.domain.site import TransportSpec
from fedhpc.errors import FedError
from fedhpc.globus_auth import apps as auth_apps
from fedhpc.globus_auth.identity import Identity, choose_identity
from fedhpc.globus_auth.login import login, logout
from fedhpc.globus_auth.scopes import TRANSFER_SCOPE, data_access_scope
from fedhpc.globus_auth.store import open_token_storage
from fedhpc.ops.continuations import DEFAULT_WAKE_EVENTS
from fedhpc.ops.data import MoveDataRequest, TransferRequest, TransferState
from fedhpc.profiles import load_profiles
from fedhpc.store import Store
from fedhpc.transfer.globus import GlobusBackend, daemon_transfer_client
from fedhpc.transfer.service import TransferService
from tests.unit.globus_fake_auth import CANARY, CLIENT_ID, FakeAuth

ASKED = "6f1e3c2a-0000-4000-8000-00000000d001"  # in the config at login time
NEW = "6f1e3c2a-0000-4000-8000-00000000e001"  # added later: never consented
ENDPOINT = "4b116d3c-1703-4f8f-9f6f-39921e5864df"
BEARER = "Bearer " + CANARY


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in (
        "GLOBUS_CLIENT_ID",
        "GLOBUS_CLIENT_SECRET",
        "GLOBUS_COMPUTE_CLIENT_ID",
        "GLOBUS_COMPUTE_CLIENT_SECRET",
        "FEDHPC_GLOBUS_IDENTITY",
        "FEDHPC_GLOBUS_CLIENT_ID",
    ):
        monkeypatch.delenv(var, raising=False)
    auth_apps.reset()
    return tmp_path / "home"


@pytest.fixture
def fake() -> Iterator[FakeAuth]:
    responses.start()
    fake = FakeAuth()
    fake.register()
    yield fake
    responses.stop()
    responses.reset()
    auth_apps.reset()


def _login(home: Path, monkeypatch: pytest.MonkeyPatch, fake: FakeAuth, *, expires_in: int) -> None:
    fake.expires_in = expires_in
    monkeypatch.setattr("sys.stdin", io.StringIO("code\n"))
    login(home, collections=[ASKED], client_id=CLIENT_ID, browser=False)
    fake.expires_in = 172800
    # From here on the daemon must never read stdin: any read fails the test.
    monkeypatch.setattr("sys.stdin", _NoStdin())


class _NoStdin(io.StringIO):
    def read(self, *a: object) -> str:
        raise AssertionError("the daemon read stdin (a login prompt)")

    # typeshed's io._IOBase.readline returns bytes and its text streams override it to str
    # under the same ignore.
    def readline(self, *a: object) -> str:  # type: ignore[override]
        raise AssertionError("the daemon read stdin (a login prompt)")


def _auth_headers(fragment: str) -> list[str]:
    found = []
    for c in responses.calls:
        if fragment in str(c.request.url):
            header = c.request.headers.get("Authorization", "")
            assert isinstance(header, str), header  # the SDK sends text headers
            found.append(header)
    return found


def _compute_submit_responses() -> str:
    function_id: str = load_response("compute.v3.register_function").metadata["function_id"]
    load_response(
        RegisteredResponse(
            service="compute",
            path=f"/v3/endpoints/{ENDPOINT}/submit",
            method="POST",
            json={
                "request_id": "r",
                "task_group_id": "9c0c0c0c-0000-4000-8000-000000000001",
                "endpoint_id": ENDPOINT,
                "tasks": {function_id: ["task-1"]},
            },
        )
    )
    return function_id


def _transport(home: Path) -> GlobusComputeTransport:
    spec = TransportSpec(kind="globus-compute", endpoint_id=ENDPOINT)
    return GlobusComputeTransport(spec, state_dir=home)


async def test_compute_and_transfer_refresh_the_stored_tokens_and_persist_the_rotation(
    home: Path, fake: FakeAuth, monkeypatch: pytest.MonkeyPatch
) -> None:
    _login(home, monkeypatch, fake, expires_in=1)  # access tokens already stale
    load_response(globus_sdk.TransferClient.get_submission_id)
    _compute_submit_responses()
    backend = GlobusBackend(lambda: daemon_transfer_client(home), home=home)
    with anyio.fail_after(30):
        await backend.submission_id()
        assert await _transport(home).submit(Command(("true",))) == "task-1"
    transfer_rs, compute_rs = "transfer.api.globus.org", "funcx_service"
    assert _auth_headers("transfer.api.globus.org") == [f"{BEARER}-{transfer_rs}-access-2"]
    compute = _auth_headers("compute.api.globus.org")
    assert compute and set(compute) == {f"{BEARER}-{compute_rs}-access-2"}
    refreshes = [p for p in fake.posts if p["grant_type"] == ["refresh_token"]]
    presented = [p["refresh_token"][0] for p in refreshes]
    for rs in (compute_rs, transfer_rs):  # each refreshed once, with the login's token
        assert presented.count(f"{CANARY}-{rs}-refresh-1") == 1
    storage = open_token_storage(home, create=False)
    assert storage is not None
    stored = storage.get_token_data_by_resource_server()
    storage.close()
    assert stored[transfer_rs].refresh_token == f"{CANARY}-{transfer_rs}-refresh-2"  # rotated
    assert stored[compute_rs].refresh_token == f"{CANARY}-{compute_rs}-refresh-2"


async def test_a_consent_the_login_never_asked_for_names_exactly_that_scope(
    home: Path, fake: FakeAuth, monkeypatch: pytest.MonkeyPatch
) -> None:
    _login(home, monkeypatch, fake, expires_in=172800)
    backend = GlobusBackend(lambda: daemon_transfer_client(home), home=home)
    for collection in (NEW, ASKED):
        scope = f"{TRANSFER_SCOPE}[*{data_access_scope(collection)}]"
        responses.add(
            responses.GET,
            "https://transfer.api.globus.org/v0.10/submission_id",
            status=403,
            json={"code": "ConsentRequired", "message": "consent", "required_scopes": [scope]},
        )
    with pytest.raises(FedError) as new:
        await backend.submission_id()
    with pytest.raises(FedError) as asked:
        await backend.submission_id()
    scope = f"{TRANSFER_SCOPE}[*{data_access_scope(NEW)}]"
    assert new.value.code == "globus_login_required"
    assert new.value.hint.startswith(f"Run `fedhpc login --scope '{scope}'` in a terminal")
    # asked at login but not granted (declined, or revoked since): logging in again fixes it
    assert asked.value.code == "globus_login_required"
    assert asked.value.hint.startswith("Run `fedhpc login` in a terminal")


async def test_a_compute_session_requirement_never_prompts_and_names_the_domain(
    home: Path, fake: FakeAuth, monkeypatch: pytest.MonkeyPatch
) -> None:
    _login(home, monkeypatch, fake, expires_in=172800)
    gare = {
        "code": "AuthorizationRequired",
        "error": "session",
        "description": "HA endpoint",
        "authorization_parameters": {
            "session_required_single_domain": ["uni.edu"],
            "session_message": "needs a uni.edu session",
        },
    }
    responses.add(
        responses.POST, "https://compute.api.globus.org/v3/functions", status=403, json=gare
    )
    with anyio.fail_after(30), pytest.raises(FedError) as caught:
        await _transport(home).submit(Command(("true",)))
    assert caught.value.code == "globus_login_required"
    assert "`fedhpc login --domain uni.edu`" in caught.value.hint


async def test_a_revoked_login_is_login_required_not_a_retry_loop(
    home: Path, fake: FakeAuth, monkeypatch: pytest.MonkeyPatch
) -> None:
    _login(home, monkeypatch, fake, expires_in=1)
    fake.refresh_fails = True  # the person revoked fedhpc at app.globus.org
    backend = GlobusBackend(lambda: daemon_transfer_client(home), home=home)
    with pytest.raises(FedError) as caught:
        await backend.submission_id()
    assert caught.value.code == "globus_login_required"
    assert "`fedhpc login`" in caught.value.hint


async def test_a_new_login_is_used_by_a_running_daemon_without_restart(
    home: Path, fake: FakeAuth, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = GlobusBackend(lambda: daemon_transfer_client(home), home=home)
    with pytest.raises(FedError) as before:
        await backend.submission_id()
    assert before.value.code == "globus_login_required"
    _login(home, monkeypatch, fake, expires_in=172800)
    load_response(globus_sdk.TransferClient.get_submission_id)
    await backend.submission_id()
    assert _auth_headers("transfer.api.globus.org")[-1].startswith(BEARER)
    logout(home)  # from another process, as `fedhpc logout` would
    sent = len(responses.calls)
    with pytest.raises(FedError) as after:
        await backend.submission_id()
    assert after.value.code == "globus_login_required"
    assert len(responses.calls) == sent  # the cached app is not used after a logout


def test_identity_precedence_service_credentials_then_the_person_unless_forced() -> None:
    both = {"GLOBUS_COMPUTE_CLIENT_ID": "x", "GLOBUS_COMPUTE_CLIENT_SECRET": "s"}
    assert choose_identity("compute", both) is Identity.SERVICE
    assert choose_identity("transfer", both) is Identity.USER  # its own variables are unset
    assert choose_identity("compute", {"GLOBUS_COMPUTE_CLIENT_ID": "x"}) is Identity.USER
    forced = {**both, "FEDHPC_GLOBUS_IDENTITY": "user"}
    assert choose_identity("compute", forced) is Identity.USER
    with pytest.raises(FedError) as caught:
        choose_identity("transfer", {"FEDHPC_GLOBUS_IDENTITY": "service"})
    assert caught.value.code == "globus_identity"
    assert "GLOBUS_CLIENT_SECRET" in caught.value.message


# -- the canary: tokens never leave the token database -----------------------------------------


async def test_tokens_never_reach_logs_events_payloads_or_answers(
    home: Path, fake: FakeAuth, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with structlog.testing.capture_logs() as logs:
        _login(home, monkeypatch, fake, expires_in=1)
        p = load_profiles()
        sites = {
            "delta": Site(p["delta"], UserSiteConfig(collections={"work": ASKED})),
            "polaris": Site(p["polaris"], UserSiteConfig(collections={"eagle": NEW})),
        }
        load_response(globus_sdk.TransferClient.get_submission_id)
        scope = f"{TRANSFER_SCOPE}[*{data_access_scope(NEW)}]"
        responses.add(
            responses.POST,
            "https://transfer.api.globus.org/v0.10/transfer",
            status=403,
            json={"code": "ConsentRequired", "message": "consent", "required_scopes": [scope]},
        )
        store = await Store.open(home / "fedhpc.db")
        try:
            svc = TransferService(store, sites, home=home)  # the real Globus backend
            handle = await svc.move_data(
                MoveDataRequest(source="delta:work/p/in.dat", destination="polaris:eagle/p/in.dat")
            )
            view = await svc.view(TransferRequest(transfer_id=handle.transfer_id))
            await svc.tick()
            events = await store.events_after(0)
        finally:
            await store.close()
    assert handle.state is TransferState.FAILED
    (event,) = events
    assert event.kind == "transfer.failed"
    assert event.payload["error"]["code"] == "globus_login_required"
    assert f"fedhpc login --scope '{scope}'" in event.payload["error"]["hint"]
    payload = build_payload(
        {"kind": event.kind, "id": event.id, "subject": event.subject, "payload": event.payload},
        [],
        delivery_id="d1",
    )
    assert f"fedhpc login --scope '{scope}'" in payload["hint"]
    assert _auth_headers("transfer.api.globus.org")[0].startswith(BEARER)  # tokens were used
    texts = [
        repr(logs),
        caplog.text,
        handle.model_dump_json(),
        view.model_dump_json(),
        json.dumps([e.payload for e in events]),
        json.dumps(payload),
    ]
    for text in texts:
        assert CANARY not in text


def test_a_task_whose_stage_in_failed_wakes_the_agent_by_default() -> None:
    assert "task.stage_in_failed" in DEFAULT_WAKE_EVENTS
    cmd = "fedhpc login --scope 'x'"
    event = {
        "kind": "task.stage_in_failed",
        "id": 7,
        "subject": "t1",
        "payload": {
            "task_id": "t1",
            "state": "failed",
            "reason": "stage-in x failed",
            "hint": f"Run `{cmd}` in a terminal",
        },
    }
    payload = build_payload(event, [], delivery_id="d1")
    assert cmd in payload["hint"]
    assert any("hint" in step for step in payload["next"])
