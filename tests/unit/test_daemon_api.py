"""The daemon's REST API is one table (daemon/api.py): the app mounts exactly its routes, and the
client reaches every route through it (a real app on a real store, served in process)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from starlette.routing import Route

import fedhpc.client
from fedhpc.client.daemon_client import DaemonClient
from fedhpc.daemon import api
from fedhpc.daemon.app import build_app
from fedhpc.domain import ResourceEnvelope
from fedhpc.errors import FedError
from fedhpc.ops.continuations import ContinuationSpec
from fedhpc.ops.data import TransferRequest
from fedhpc.ops.tasks import CancelRequest, GroupChild, ResultRequest, SubmitGroupRequest
from fedhpc.store import Store
from fedhpc.store.schema import SCHEMA_VERSION
from tests.unit.daemon_support import daemon_state


def test_paths_carry_each_id_as_one_quoted_segment() -> None:
    assert api.GET_RESULT.url("t-1") == "/v1/tasks/t-1"
    assert api.CANCEL.url("a/../b?c") == "/v1/tasks/a%2F..%2Fb%3Fc/cancel"
    assert api.HEALTH.url() == "/v1/health"
    with pytest.raises(TypeError, match="takes 1 path parameter"):
        api.GROUP.url()


def test_every_route_has_a_unique_method_and_path_and_name() -> None:
    assert len({(e.method, e.path) for e in api.ROUTES}) == len(api.ROUTES)
    assert len({e.name for e in api.ROUTES}) == len(api.ROUTES)
    named = {v for k, v in vars(api).items() if k.isupper() and isinstance(v, api.Endpoint)}
    assert named == set(api.ROUTES)


async def test_the_app_mounts_exactly_the_route_table_in_its_order(store: Store) -> None:
    app = build_app(daemon_state(store))
    mounted = [(r.path, r.methods, r.name) for r in app.routes if isinstance(r, Route)]
    assert len(mounted) == len(app.routes)
    head = {"GET": {"GET", "HEAD"}, "POST": {"POST"}}
    assert mounted == [(e.path, head[e.method], e.name) for e in api.ROUTES]


def test_the_client_writes_no_path_of_its_own() -> None:
    for module in sorted(Path(fedhpc.client.__file__).parent.glob("*.py")):
        assert "/v1/" not in module.read_text(), module.name


async def test_the_client_reaches_each_read_route_of_the_app(
    client: DaemonClient, store: Store
) -> None:
    health = await client.health()
    assert health["sites"] == []
    assert health["schema"] == await store.schema_version() == SCHEMA_VERSION  # the file's
    assert (await client.federation()).sites == ()
    assert await client.tasks() == []
    assert await client.groups() == []
    assert await client.events() == []
    assert await client.deliveries() == []
    assert (await client.history())["sites"] == {}
    assert (await client.estimators())["estimators"] == []
    assert (await client.outlook())["rows"] == []
    assert await client.binding("no-such-call") is None


async def test_health_tells_how_long_the_daemon_took_to_answer(client: DaemonClient) -> None:
    """The daemon's own share of a caller's wait, per answer, typed errors included."""
    first = (await client.health())["requests"]
    assert first == {"answered": 0, "window": 0}  # health's own answer is counted after it
    await client.tasks()
    with pytest.raises(FedError):
        await client.group("no-such-group")
    raw = await client.http.get("/v1/tasks")
    name, dur = raw.headers["server-timing"].split(";dur=")
    assert (name, float(dur) >= 0) == ("app", True)
    later = (await client.health())["requests"]
    assert later["answered"] == later["window"] == 4
    assert 0 <= later["p50_ms"] <= later["p99_ms"] <= later["max_ms"]
    assert later["slowest_route"] in {
        "GET /v1/health",
        "GET /v1/tasks",
        "GET /v1/groups/{group_id}",
    }


@pytest.mark.parametrize("op", ["result", "cancel", "group", "transfer"])
async def test_an_unknown_id_reaches_its_route_and_is_answered_typed(
    client: DaemonClient, op: str
) -> None:
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "result": lambda: client.get_result(ResultRequest(task_id="nosuch")),
        "cancel": lambda: client.cancel(CancelRequest(task_id="nosuch")),
        "group": lambda: client.group("nosuch"),
        "transfer": lambda: client.transfer(TransferRequest(transfer_id="nosuch")),
    }
    with pytest.raises(FedError) as caught:
        await calls[op]()
    # a route that did not match would answer starlette's plain 404, not a typed error
    assert caught.value.code in {"not_found", "usage"}, caught.value.as_dict()


async def test_a_continuation_for_an_unknown_id_says_which_ids_it_can_wake_for(
    client: DaemonClient,
) -> None:
    spec = ContinuationSpec(runtime="command", command=["true"])
    with pytest.raises(FedError) as caught:
        await client.register_continuation("nosuch", spec)
    assert caught.value.code == "not_found"
    assert "fedhpc tasks" not in caught.value.hint  # it lists tasks, not groups or transfers
    assert "submit_group" in caught.value.hint and "move_data" in caught.value.hint


async def test_groups_lists_the_newest_with_counts_over_every_child(client: DaemonClient) -> None:
    """GET /v1/groups: the dashboard's group list, each group counted whole (in SQL) and none
    of its children listed, whatever its size."""
    one_cpu = ResourceEnvelope.model_validate({"cpus": {"min": 1, "max": 1}})
    made = []
    for size in (3, 250, 2):
        children = tuple(GroupChild(command=("true",)) for _ in range(size))
        req = SubmitGroupRequest(objective=f"{size} children", children=children, envelope=one_cpu)
        made.append((await client.submit_group(req)).group_id)
    listed = await client.groups()
    assert [g.group_id for g in listed] == made[::-1]  # newest first
    assert [(g.size, sum(g.counts.values()), g.children) for g in listed] == [
        (2, 2, ()),
        (250, 250, ()),
        (3, 3, ()),
    ]
    assert [g.group_id for g in await client.groups(limit=1)] == [made[-1]]
    with pytest.raises(FedError) as caught:
        await client.groups(limit=0)
    assert caught.value.code == "validation", caught.value.as_dict()
