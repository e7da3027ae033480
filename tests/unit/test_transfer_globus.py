"""The Globus Transfer backend offline, with the SDK's own registered responses: submit under a
persisted submission id, poll active/succeeded/failed, expired consent and credentials, a
duplicate submission, and a daemon that authenticates without ever prompting."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import globus_sdk
import pytest
import responses
from globus_sdk.testing import RegisteredResponse, load_response

from fedhpc.domain.config import Site, UserSiteConfig
from fedhpc.errors import FedError
from fedhpc.ops.data import DataLocation, MoveDataRequest, SyncLevel, TransferState
from fedhpc.profiles import load_profiles
from fedhpc.store import Store
from fedhpc.transfer import TransferSpec
from fedhpc.transfer.globus import GlobusBackend, daemon_transfer_client
from fedhpc.transfer.service import TransferService
from tests.unit.globus_requests import json_body, last_request
from tests.unit.globus_world import (
    DST,
    SRC,
    TASK,
    globus_backend,
    globus_client,
    globus_sites,
    mocked_http,  # noqa: F401 (autouse: Globus answered offline)
    submit_answer,
    submit_refused,
    task_status,
)

TRANSFER = "https://transfer.api.globus.org/v0.10/transfer"


_client, _backend = globus_client, globus_backend


def _spec(submission_id: str, **kw: Any) -> TransferSpec:
    src = DataLocation(
        site="delta",
        root="work",
        root_path="/work/hdd",
        collection_id=SRC,
        path="/work/hdd/p/in.dat",
    )
    dst = DataLocation(
        site="polaris", root="eagle", root_path="/eagle", collection_id=DST, path="/eagle/p/in.dat"
    )
    return TransferSpec(
        transfer_id="x1", submission_id=submission_id, source=src, destination=dst, **kw
    )


def _transfer_posts() -> list[dict[str, Any]]:
    return [
        json_body(c.request)
        for c in responses.calls
        if c.request.method == "POST" and c.request.url == TRANSFER
    ]


async def test_submit_sends_the_persisted_submission_id_and_the_copy_options() -> None:
    sid = load_response(globus_sdk.TransferClient.get_submission_id).metadata["submission_id"]
    meta = load_response(globus_sdk.TransferClient.submit_transfer).metadata
    backend = _backend()
    assert await backend.submission_id() == sid
    task_id = await backend.submit(
        _spec(sid, recursive=True, sync_level=SyncLevel.CHECKSUM, verify_checksum=True)
    )
    assert task_id == meta["task_id"]
    body = json_body(last_request())
    assert body["submission_id"] == sid
    assert (body["source_endpoint"], body["destination_endpoint"]) == (SRC, DST)
    assert body["sync_level"] == 3  # the SDK sends "checksum" as its API number
    assert body["verify_checksum"] is True
    (item,) = body["DATA"]
    assert (item["source_path"], item["destination_path"], item["recursive"]) == (
        "/work/hdd/p/in.dat",
        "/eagle/p/in.dat",
        True,
    )


async def test_a_duplicate_submission_returns_the_original_task_and_starts_no_second() -> None:
    sid = "8b1a0f0e-2222-4000-8000-000000000001"
    submit_answer(sid)
    submit_answer(sid, "Duplicate")
    backend = _backend()
    first = await backend.submit(_spec(sid))
    again = await backend.submit(_spec(sid))  # a retry after a lost answer
    assert first == again == TASK
    assert [p["submission_id"] for p in _transfer_posts()] == [sid, sid]


@pytest.mark.parametrize(
    ("doc", "state"),
    [
        ({"status": "ACTIVE", "bytes_transferred": 10}, TransferState.ACTIVE),
        (
            {
                "status": "SUCCEEDED",
                "bytes_transferred": 42,
                "files_transferred": 1,
                "verify_checksum": True,
            },
            TransferState.SUCCEEDED,
        ),
        (
            {
                "status": "FAILED",
                "fatal_error": {
                    "code": "PERMISSION_DENIED",
                    "description": "permission denied on /eagle/p",
                },
            },
            TransferState.FAILED,
        ),
    ],
)
async def test_polling_maps_the_task_status(doc: dict[str, Any], state: TransferState) -> None:
    task_status(**doc)
    st = await _backend().status(TASK)
    assert st.state is state
    if state is TransferState.SUCCEEDED:
        assert (st.bytes, st.files, st.checksum_verified) == (42, 1, True)
    if state is TransferState.FAILED:
        assert st.error is not None
        assert st.error.code == "PERMISSION_DENIED"


async def test_an_inactive_task_waiting_for_credentials_is_active_but_blocked() -> None:
    task_status(
        "INACTIVE", nice_status="AUTH", nice_status_short_description="endpoint credentials expired"
    )
    st = await _backend().status(TASK)
    assert st.state is TransferState.ACTIVE
    assert st.blocked is not None
    assert st.blocked.code == "AUTH"
    assert "fedhpc login" in st.blocked.hint


async def test_a_missing_data_access_consent_at_submit_names_the_exact_login_command() -> None:
    scope = (
        "urn:globus:auth:scope:transfer.api.globus.org:all"
        f"[*https://auth.globus.org/scopes/{DST}/data_access]"
    )
    load_response(
        RegisteredResponse(
            service="transfer",
            method="POST",
            path="/v0.10/transfer",
            status=403,
            json={
                "code": "ConsentRequired",
                "message": "Missing required data_access consent",
                "required_scopes": [scope],
            },
        )
    )
    with pytest.raises(FedError) as exc:
        await _backend().submit(_spec("8b1a0f0e-2222-4000-8000-000000000002"))
    assert exc.value.code == "globus_login_required"
    assert f"`fedhpc login --scope '{scope}'`" in exc.value.hint
    assert "dummy-token" not in exc.value.message


async def test_an_expired_token_while_polling_is_a_typed_authorization_error() -> None:
    load_response(
        RegisteredResponse(
            service="transfer",
            method="GET",
            path=f"/v0.10/task/{TASK}",
            status=401,
            json={"code": "AuthenticationFailed", "message": "Token is not active"},
        )
    )
    with pytest.raises(FedError) as exc:
        await _backend().status(TASK)
    assert exc.value.code == "transfer_auth"


@pytest.mark.parametrize(
    ("status", "code"), [(503, "transfer_unavailable"), (400, "transfer_failed")]
)
async def test_server_errors_are_transient_and_bad_requests_permanent(
    status: int, code: str
) -> None:
    if status == 400:
        load_response(globus_sdk.TransferClient.submit_transfer, case="failure")
    else:
        load_response(
            RegisteredResponse(
                service="transfer",
                method="POST",
                path="/v0.10/transfer",
                status=503,
                json={"code": "ServiceUnavailable", "message": "x"},
            )
        )
    with pytest.raises(FedError) as exc:
        await _backend().submit(_spec("8b1a0f0e-2222-4000-8000-000000000003"))
    assert exc.value.code == code


# -- the daemon's credentials ---------------------------------------------------------------


async def test_client_credentials_authenticate_without_a_person(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GLOBUS_CLIENT_ID", "c7f0e6a8-3333-4000-8000-000000000001")
    monkeypatch.setenv("GLOBUS_CLIENT_SECRET", "canary-secret-do-not-log")
    load_response(globus_sdk.ConfidentialAppAuthClient.oauth2_client_credentials_tokens)
    sid = load_response(globus_sdk.TransferClient.get_submission_id).metadata["submission_id"]
    backend = GlobusBackend(lambda: daemon_transfer_client(tmp_path))
    assert await backend.submission_id() == sid
    token_call = next(c for c in responses.calls if "/v2/oauth2/token" in str(c.request.url))
    assert "grant_type=client_credentials" in str(token_call.request.body)
    auth = last_request().headers["Authorization"]
    assert isinstance(auth, str) and auth.startswith("Bearer ")


async def test_without_stored_tokens_the_daemon_fails_typed_instead_of_prompting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GLOBUS_CLIENT_ID", "c7f0e6a8-3333-4000-8000-000000000002")
    monkeypatch.delenv("GLOBUS_CLIENT_SECRET", raising=False)
    backend = GlobusBackend(lambda: daemon_transfer_client(tmp_path), home=tmp_path)
    with pytest.raises(FedError) as exc:
        await backend.submission_id()
    assert exc.value.code == "globus_login_required"
    assert "`fedhpc login`" in exc.value.hint
    assert not responses.calls  # nothing was sent, nothing asked on stdin


# -- through the service: persisted submission id, retry, events ----------------------------


@pytest.fixture
def real_sites() -> dict[str, Site]:
    return globus_sites()


async def test_a_failed_submit_is_retried_next_cycle_with_the_same_persisted_submission_id(
    tmp_path: Path, real_sites: dict[str, Site]
) -> None:
    sid = load_response(globus_sdk.TransferClient.get_submission_id).metadata["submission_id"]
    load_response(
        RegisteredResponse(
            service="transfer",
            method="POST",
            path="/v0.10/transfer",
            status=503,
            json={"code": "ServiceUnavailable", "message": "try later"},
        )
    )
    submit_answer(sid)
    task_status("SUCCEEDED", bytes_transferred=7, files_transferred=1)
    store = await Store.open(tmp_path / "fedhpc.db")
    try:
        svc = TransferService(
            store,
            real_sites,
            home=tmp_path,
            backends={"globus": _backend()},
            clock=lambda: datetime(2026, 11, 29, tzinfo=UTC),
        )
        req = MoveDataRequest(source="delta:work/p/in.dat", destination="polaris:eagle/p/in.dat")
        handle = await svc.move_data(req)
        assert handle.backend == "globus"
        assert handle.state is TransferState.QUEUED  # the 503: nothing lost, retried next cycle
        assert (await svc.load(handle.transfer_id)).submission_id == sid
        # a new daemon (restart) picks it up from the store alone
        svc2 = TransferService(store, real_sites, home=tmp_path, backends={"globus": _backend()})
        await svc2.tick()  # submit, same submission id
        await svc2.tick()  # poll
        rec = await svc2.load(handle.transfer_id)
        assert rec.state is TransferState.SUCCEEDED
        assert rec.backend_id == TASK
        assert [p["submission_id"] for p in _transfer_posts()] == [sid, sid]
        assert sum("/submission_id" in str(c.request.url) for c in responses.calls) == 1
        assert (await svc2.move_data(req)).transfer_id == handle.transfer_id  # idempotent
        events = await store.events_after(0)
        assert [(e.kind, e.subject) for e in events] == [("transfer.succeeded", handle.transfer_id)]
    finally:
        await store.close()


async def test_an_expired_consent_fails_the_transfer_with_one_event_carrying_the_hint(
    tmp_path: Path, real_sites: dict[str, Site]
) -> None:
    submit_refused(403, code="ConsentRequired", message="consent expired")
    store = await Store.open(tmp_path / "fedhpc.db")
    try:
        svc = TransferService(store, real_sites, home=tmp_path, backends={"globus": _backend()})
        handle = await svc.move_data(
            MoveDataRequest(source="delta:work/p/in.dat", destination="polaris:eagle/p/in.dat")
        )
        assert handle.state is TransferState.FAILED
        await svc.tick()
        (event,) = await store.events_after(0)
        assert event.kind == "transfer.failed"
        assert event.payload["error"]["code"] == "transfer_auth"
        assert "GLOBUS_CLIENT_ID" in event.payload["error"]["hint"]
    finally:
        await store.close()


async def test_a_globus_route_without_a_collection_is_refused_before_anything_is_stored(
    tmp_path: Path,
) -> None:
    p = load_profiles()
    sites = {
        "delta": Site(p["delta"], UserSiteConfig(collections={"work": SRC})),
        "polaris": Site(p["polaris"], UserSiteConfig()),
    }
    store = await Store.open(tmp_path / "fedhpc.db")
    try:
        svc = TransferService(store, sites, home=tmp_path, backends={"globus": _backend()})
        with pytest.raises(FedError) as exc:
            await svc.move_data(
                MoveDataRequest(source="delta:work/a", destination="polaris:eagle/a")
            )
        assert exc.value.code == "unknown_collection"
        assert await store.count("transfers") == 0
        assert not responses.calls
    finally:
        await store.close()
