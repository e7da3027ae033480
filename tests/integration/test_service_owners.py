"""Service mode (issue 34): one identity per person. Two people signed in at a real OpenID
provider, each through two MCP sessions, submit work; neither can read, list, cancel or replan
the other's tasks and groups, nor see their events, and another person's id is `not_found`
(never "forbidden"); a `fedhpc:admin` token reads both."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.types import (
    CallToolResult,
    SubscriptionFilter,
    SubscriptionsAcknowledgedNotification,
    SubscriptionsListenRequest,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
)

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.client.wire import ACTING_FOR
from fedhpc.settings.daemon import DaemonSettings
from tests.integration.test_service_oauth import (  # noqa: F401 (the module's fixture)
    Service,
    _client,
    service,
)

SMALL = {"cpus": {"min": 1, "max": 1}, "wall_time": {"min": "5m"}}
LONG = {"command": ["sleep", "600"], "envelope": SMALL}
SMALL_ENV = {"envelope": SMALL}


def _answer(result: CallToolResult) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(result.content[0].text)  # type: ignore[union-attr]
    return body


def _ok(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    return _answer(result)


def _not_found(result: CallToolResult, what: str) -> None:
    assert result.is_error, (what, result.content)
    body = _answer(result)
    assert body["code"] == "not_found", (what, body)
    assert "forbidden" not in json.dumps(body).lower()


async def _events(client: Client, after: int = 0) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while True:
        page = _ok(await client.call_tool("list_events", {"after": after, "limit": 200}))
        out.extend(page["events"])
        after = page["next_after"]
        if not page["more"]:
            return out


async def _until_event(client: Client, subject: str) -> list[dict[str, Any]]:
    with anyio.fail_after(240):
        while True:
            seen = await _events(client)
            if any(e["subject"] == subject for e in seen):
                return seen
            await anyio.sleep(0.5)


async def test_two_people_see_only_their_own_work_and_an_admin_sees_both(
    service: Service,  # noqa: F811 (the fixture imported above)
) -> None:
    both = "fedhpc:read fedhpc:submit"
    alice = [service.mint("alice", both), service.mint("alice", both)]
    carol = [service.mint("carol", both), service.mint("carol", both)]
    admin = service.mint("dana", "fedhpc:read fedhpc:submit fedhpc:admin")
    url = service.resource
    async with (
        _client(url, alice[0]) as a1,
        _client(url, alice[1]) as a2,
        _client(url, carol[0]) as c1,
        _client(url, carol[1]) as c2,
        _client(url, admin) as root,
    ):
        quick = _ok(await a1.call_tool("submit_task", {"command": ["true"], "envelope": SMALL}))[
            "task_id"
        ]
        a_long = _ok(await a1.call_tool("submit_task", LONG))["task_id"]
        group = _ok(
            await a2.call_tool(
                "submit_group",
                {
                    "objective": "alice's pair",
                    "envelope": SMALL,
                    "children": [{"command": ["sleep", "600"], "name": f"s{i}"} for i in (1, 2)],
                },
            )
        )
        a_group = group["group_id"]
        c_long = _ok(await c2.call_tool("submit_task", LONG))["task_id"]
        alice_ids = {quick, a_long, a_group} | {c["task_id"] for c in group["children"]}

        # One person, every session: alice's second session reads what her first submitted.
        assert _ok(await a2.call_tool("get_result", {"task_id": a_long}))["task_id"] == a_long
        assert _ok(await a1.call_tool("get_result", {"task_id": quick}))["task_id"] == quick

        # The other person, from either session: every tool that takes an id says not_found,
        # as for an id nobody has.
        for other, mine, theirs in ((c1, c_long, a_long), (a2, a_long, c_long)):
            _not_found(await other.call_tool("get_result", {"task_id": theirs}), "get_result")
            _not_found(await other.call_tool("cancel", {"task_id": theirs}), "cancel")
            replan = {"task_id": theirs, "exclude_sites": []}
            _not_found(await other.call_tool("replan", replan), "replan")
            assert _ok(await other.call_tool("get_result", {"task_id": mine}))["task_id"] == mine
        for session in (c1, c2):
            _not_found(await session.call_tool("cancel", {"task_id": a_group}), "cancel group")
            _not_found(await session.call_tool("get_result", {"task_id": a_group}), "group id")
            for uri in (f"fedhpc://tasks/{a_long}", f"fedhpc://groups/{a_group}"):
                with pytest.raises(MCPError) as err:
                    await session.read_resource(uri)
                assert isinstance(err.value.error.data, dict)
                assert err.value.error.data["code"] == "not_found", (uri, err.value.error)
        # Nothing of alice's was cancelled by those attempts.
        state = _ok(await a1.call_tool("get_result", {"task_id": a_long}))["state"]
        assert state != "cancelled"

        # Events: alice's own sessions see her task's; carol's never see any of alice's.
        seen = await _until_event(a2, quick)
        assert all(e["subject"] in alice_ids for e in seen), seen
        for session in (c1, c2):
            subjects = {e["subject"] for e in await _events(session)}
            assert not subjects & alice_ids, subjects
            assert subjects <= {c_long}, subjects

        # Cursors: carol acknowledging everything under the name alice uses moves only her own.
        newest = max(e["seq"] for e in seen)
        _ok(await c1.call_tool("ack_events", {"consumer": "agent", "through": newest}))
        page = _ok(await a2.call_tool("list_events", {"consumer": "agent", "limit": 200}))
        assert quick in {e["subject"] for e in page["events"]}, page

        # The admin reads both people's work and events.
        for tid in (a_long, c_long, quick):
            assert _ok(await root.call_tool("get_result", {"task_id": tid}))["task_id"] == tid
        await root.read_resource(f"fedhpc://groups/{a_group}")
        subjects = {e["subject"] for e in await _events(root)}
        assert quick in subjects

        # The daemon's own listing (GET /v1/tasks) is scoped the same way for each person.
        settings = DaemonSettings.from_env(home=service.home)
        async with DaemonClient(settings) as daemon:
            everyone = {t.task_id for t in await daemon.tasks(limit=1000)}
            assert {a_long, c_long, quick} <= everyone  # no owner: the single-user view
            issuer = service.provider.issuer
            for who, mine_, theirs_ in (
                ("carol", {c_long}, alice_ids),
                ("alice", alice_ids, {c_long}),
            ):
                token = ACTING_FOR.set((f"{issuer}|{who}", False))
                try:
                    listed = {t.task_id for t in await daemon.tasks(limit=1000)}
                finally:
                    ACTING_FOR.reset(token)
                assert not listed & theirs_, (who, listed)
                assert (mine_ - {a_group}) <= listed, (who, listed)

        # Each cleans up their own; the admin may cancel anyone's.
        _ok(await c1.call_tool("cancel", {"task_id": c_long}))
        _ok(await root.call_tool("cancel", {"task_id": a_long}))
        _ok(await root.call_tool("cancel", {"task_id": a_group}))


async def test_a_subscription_to_another_persons_task_is_not_honored(service: Service) -> None:  # noqa: F811
    both = "fedhpc:read fedhpc:submit"
    url = service.resource
    async with _client(url, service.mint("alice", both)) as alice:
        theirs = _ok(await alice.call_tool("submit_task", LONG))["task_id"]
    carol_token = service.mint("carol", both)
    async with _client(url, carol_token) as carol:
        mine = _ok(await carol.call_tool("submit_task", {**LONG, "name": "c"}))["task_id"]
    honored: list[list[str]] = []
    acked = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, SubscriptionsAcknowledgedNotification):
            honored.append(list(message.params.notifications.resource_subscriptions or ()))
            acked.set()

    asked = [f"fedhpc://tasks/{theirs}", f"fedhpc://tasks/{mine}", "fedhpc://federation"]
    req = SubscriptionsListenRequest(
        params=SubscriptionsListenRequestParams(
            notifications=SubscriptionFilter.model_validate({"resourceSubscriptions": asked})
        )
    )
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {carol_token}"}, timeout=60)
    async with (
        http,
        Client(streamable_http_client(url, http_client=http), message_handler=on_message) as c,
        anyio.create_task_group() as tg,
    ):

        async def stream() -> None:
            await c.session.send_request(req, SubscriptionsListenResult, 3600)

        tg.start_soon(stream)
        with anyio.fail_after(60):
            await acked.wait()
        tg.cancel_scope.cancel()
    assert honored == [[f"fedhpc://tasks/{mine}", "fedhpc://federation"]], honored
    async with _client(url, service.mint("dana", "fedhpc:read fedhpc:submit fedhpc:admin")) as r:
        for tid in (theirs, mine):
            _ok(await r.call_tool("cancel", {"task_id": tid}))


async def test_a_persons_long_poll_wakes_on_their_own_event_only(
    service: Service,  # noqa: F811 (the fixture imported above)
) -> None:
    """`list_events(wait_s=...)`: a pull client (a relay, an agent without hooks) waits for its
    next event instead of polling. Another person's event lands meanwhile and wakes nothing it
    can see; the person's own task's end answers the wait."""
    scopes = "fedhpc:read fedhpc:submit"
    async with (
        _client(service.resource, service.mint("erin", scopes)) as erin,
        _client(service.resource, service.mint("frank", scopes)) as frank,
    ):
        newest = max([0, *(e["seq"] for e in await _events(erin))])
        page: dict[str, Any] = {}

        async def wait() -> None:
            args = {"after": newest, "wait_s": 60, "consumer": "relay"}
            page.update(_ok(await erin.call_tool("list_events", args)))

        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                theirs = _ok(
                    await frank.call_tool("submit_task", {"command": ["true"], **SMALL_ENV})
                )
                await _until_event(frank, theirs["task_id"])  # frank's end landed...
                assert not page  # ...and woke nobody erin can see
                mine = _ok(await erin.call_tool("submit_task", {"command": ["true"], **SMALL_ENV}))
        assert [e["subject"] for e in page["events"]] == [mine["task_id"]], page
        assert page["events"][0]["kind"] == "task.terminal"
