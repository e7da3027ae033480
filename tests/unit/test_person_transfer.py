"""A person's Globus transfer touching a site that runs each person as themselves
(`identity = "person"`): submitted and polled with the person's own Globus Transfer token from
the facade's store, never the daemon's or another person's. The real TransferService and
Globus backend against `globus_sdk.testing` registered responses."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import responses

from fedhpc.domain.config import Site, UserSiteConfig
from fedhpc.globus_auth import apps as auth_apps
from fedhpc.globus_auth.people import install
from fedhpc.ops.data import MoveDataRequest, TransferState
from fedhpc.service.people import FacadeTokens
from fedhpc.store import Store
from fedhpc.transfer.service import TransferService
from tests.unit.globus_world import (
    DST,
    SRC,
    globus_sites,
    mocked_http,  # noqa: F401 (autouse: Globus answered offline)
    task_status,
    transfer_accepted,
)
from tests.unit.person_tokens_world import ALICE, UPSTREAM, canary, facade_tokens, sign_in

EVE = f"{UPSTREAM}|u-eve"  # never signed in through fedhpc


@pytest.fixture
async def people(tmp_path: Path) -> AsyncIterator[FacadeTokens]:
    tokens = facade_tokens(tmp_path)
    await sign_in(tokens, ALICE)
    install(tokens)
    try:
        yield tokens
    finally:
        install(None)
        auth_apps.reset()
        await tokens.aclose()


def _sites() -> dict[str, Site]:
    """delta runs each person as themselves; polaris as the service."""
    sites = globus_sites()
    delta = sites["delta"]
    mine = UserSiteConfig(collections={"work": SRC}, identity="person")
    return {**sites, "delta": Site(delta.profile, mine)}


async def test_a_persons_transfer_goes_with_their_own_transfer_token(
    tmp_path: Path, people: FacadeTokens
) -> None:
    transfer_accepted()
    task_status("SUCCEEDED", bytes_transferred=7)
    store = await Store.open(tmp_path / "fedhpc.db")
    try:
        svc = TransferService(store, _sites(), home=tmp_path / "home")
        req = MoveDataRequest(source="delta:work/p/in.dat", destination="polaris:eagle/p/in.dat")
        handle = await svc.move_data(req, owner=ALICE)
        await svc.tick()  # submit
        await svc.tick()  # poll
        assert (await svc.load(handle.transfer_id)).state is TransferState.SUCCEEDED
        said = {str(c.request.headers.get("Authorization")) for c in responses.calls}
        assert said == {f"Bearer {canary(ALICE, 'transfer')}"}  # every call, only hers
        assert DST in str(responses.calls[1].request.body)

        eves = await svc.move_data(req, owner=EVE)
        before = len(responses.calls)
        await svc.tick()
        rec = await svc.load(eves.transfer_id)
        assert rec.state is TransferState.FAILED
        assert len(responses.calls) == before  # nothing reached Globus for her
        assert rec.error is not None and rec.error.code == "person_not_authorized"
        assert "granting Globus Transfer" in rec.error.hint
        events = repr(await store.events_after(0, limit=100))
        assert canary(ALICE, "transfer") not in events
    finally:
        await store.close()
