"""A transfer's waiter is stored with the transfer (move_data carries its continuation), so an
outcome observed at once -- a submit refused for consent, a block on credentials -- finds it:
the real TransferService and the real resume bridge's routing over one store, Globus answered
by the SDK's own registered responses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fedhpc.bridge.service import Bridge
from fedhpc.domain.config import Site
from fedhpc.ops.continuations import ContinuationSpec, Runtime
from fedhpc.ops.data import MoveDataRequest, TransferState
from fedhpc.store import Store
from fedhpc.transfer.service import TransferService
from tests.unit.globus_world import (
    DST,
    globus_backend,
    globus_sites,
    mocked_http,  # noqa: F401 (autouse: Globus answered offline)
    submit_refused,
    task_status,
    transfer_accepted,
)

EVENTS = ("transfer.succeeded", "transfer.failed", "transfer.blocked")


@pytest.fixture
def sites() -> dict[str, Site]:
    return globus_sites()


def _agent(log: Path) -> ContinuationSpec:
    return ContinuationSpec(runtime=Runtime.COMMAND, command=("tee", "-a", str(log)), events=EVENTS)


def _request(agent: ContinuationSpec | None) -> MoveDataRequest:
    return MoveDataRequest(
        source="delta:work/p/in.dat", destination="polaris:eagle/p/in.dat", continuation=agent
    )


async def _delivered(store: Store) -> list[tuple[str, str]]:
    return sorted((d["body"]["kind"], d["body"]["subject"]) for d in await store.deliveries())


async def test_a_move_data_refused_at_once_answers_the_outcome_and_wakes_nobody(
    tmp_path: Path, sites: dict[str, Site]
) -> None:
    submit_refused(
        403,
        code="ConsentRequired",
        message="Missing required data_access consent",
        required_scopes=[
            f"urn:globus:auth:scope:transfer.api.globus.org:all"
            f"[*https://auth.globus.org/scopes/{DST}/data_access]"
        ],
    )
    store = await Store.open(tmp_path / "fedhpc.db")
    try:
        svc = TransferService(store, sites, home=tmp_path, backends={"globus": globus_backend()})
        bridge = Bridge(store, tmp_path)
        agent = _agent(tmp_path / "agent.log")
        handle = await svc.move_data(_request(agent))
        assert handle.state is TransferState.FAILED  # ended inside the move_data call
        # The answer is the outcome: why, the fix, and no "end your turn".
        assert handle.error is not None and "fedhpc login --scope" in handle.error.hint
        assert "will not resume you" in handle.next and "End your turn" not in handle.next
        # Logged for people and pull clients, but the caller is not woken a second time.
        kinds = [e.kind for e in await store.events_after(0)]
        assert kinds == ["transfer.failed"]
        assert await bridge.route() == 0
        assert await store.deliveries() == []
        # The same call again (a retry after a lost answer): the same outcome, no new wake.
        again = await svc.move_data(_request(agent))
        assert again.transfer_id == handle.transfer_id and again.error == handle.error
        await svc.tick()
        assert await bridge.route() == 0
        assert await store.deliveries() == []
    finally:
        await store.close()


async def test_a_move_data_blocked_on_credentials_wakes_its_continuation_exactly_once(
    tmp_path: Path, sites: dict[str, Site]
) -> None:
    transfer_accepted()
    task_status(
        "INACTIVE",
        nice_status="AUTH",
        nice_status_short_description="endpoint credentials expired",
    )
    store = await Store.open(tmp_path / "fedhpc.db")
    try:
        svc = TransferService(store, sites, home=tmp_path, backends={"globus": globus_backend()})
        bridge = Bridge(store, tmp_path)
        handle = await svc.move_data(_request(_agent(tmp_path / "agent.log")))
        assert handle.state is TransferState.ACTIVE
        await svc.tick()  # the very next cycle sees the block, before any registration could
        await svc.tick()  # still blocked: the same block, no second event
        assert await bridge.route() == 1
        assert await _delivered(store) == [("transfer.blocked", handle.transfer_id)]
        (d,) = await store.deliveries()
        payload: dict[str, Any] = d["body"]["payload"]
        assert "fedhpc login" in payload["hint"]
        assert await bridge.route() == 0
    finally:
        await store.close()


async def test_a_request_without_a_continuation_keeps_its_identity(
    tmp_path: Path, sites: dict[str, Site]
) -> None:
    """Who waits is not part of what moves: the same copy asked by a pull client and then by
    an agent is one transfer, and the agent is woken for it."""
    transfer_accepted()
    store = await Store.open(tmp_path / "fedhpc.db")
    try:
        svc = TransferService(store, sites, home=tmp_path, backends={"globus": globus_backend()})
        first = await svc.move_data(_request(None))
        second = await svc.move_data(_request(_agent(tmp_path / "agent.log")))
        assert second.transfer_id == first.transfer_id
        assert len(await store.continuations_for([first.transfer_id])) == 1
    finally:
        await store.close()
