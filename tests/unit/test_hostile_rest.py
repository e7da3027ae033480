"""The daemon's REST app under requests no client of ours sends: every answer is a typed JSON
body `{code, message, hint}` with its class's status, never a 500 or a plain-text page (a
real app on a real store, served in process)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2
import pytest

from fedhpc.daemon.app import build_app
from fedhpc.store import Store
from tests.unit.daemon_support import daemon_state


@pytest.fixture
async def http(store: Store) -> AsyncIterator[httpx2.AsyncClient]:
    transport = httpx2.ASGITransport(app=build_app(daemon_state(store)))
    async with httpx2.AsyncClient(transport=transport, base_url="http://fedhpc") as client:
        yield client


def _typed(resp: httpx2.Response) -> dict[str, object]:
    assert resp.headers["content-type"] == "application/json", resp.text
    body = resp.json()
    assert all(isinstance(body.get(k), str) and body[k] for k in ("code", "message", "hint"))
    assert isinstance(body, dict)
    return body


@pytest.mark.parametrize(
    "before",
    [
        "0001-01-01T00:00:00+05:00",
        "9999-12-31T23:59:59-05:00",
        "not-a-time",
        "99999-01-01T00:00:00",
    ],
)
async def test_a_history_before_no_utc_time_can_be_is_a_422_naming_before(
    http: httpx2.AsyncClient, before: str
) -> None:
    """`before=0001-01-01T00:00:00` answered 500: a naive time was converted as local time."""
    resp = await http.get("/v1/federation/history", params={"before": before})
    assert resp.status_code == 422, resp.text
    body = _typed(resp)
    assert body["code"] == "validation"
    assert [f["field"] for f in body["fields"]] == ["before"]  # type: ignore[attr-defined]


async def test_history_at_the_ends_of_time_is_an_answer(http: httpx2.AsyncClient) -> None:
    for before in ("0001-01-01T00:00:00", "9999-12-31T23:59:59", "2026-12-01T07:00:00+02:00"):
        resp = await http.get("/v1/federation/history", params={"before": before})
        assert resp.status_code == 200, (before, resp.text)
        assert resp.json()["sites"] == {}


async def test_an_unknown_route_or_method_is_a_typed_json_answer(
    http: httpx2.AsyncClient,
) -> None:
    """Starlette answered text/plain "Not Found" / "Method Not Allowed"."""
    resp = await http.get("/v1/nope")
    assert resp.status_code == 404
    body = _typed(resp)
    assert (body["code"], body["message"]) == ("unknown_route", "no route GET /v1/nope")
    resp = await http.delete("/v1/tasks")
    assert resp.status_code == 405
    assert resp.headers["allow"] == "GET, HEAD, POST"
    body = _typed(resp)
    assert body["code"] == "method_not_allowed"
    assert body["message"] == "/v1/tasks takes GET, HEAD, POST, not DELETE"
    assert (await http.get("/v1/tasks")).status_code == 200
