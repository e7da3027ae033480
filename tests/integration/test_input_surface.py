"""Whatever the published schemas accept, a submit answers a typed error or a task that settles
on its own, and the next session's task is still placed: a real daemon on four private
local-process sites, a real MCP client in process, arguments generated from the schemas
`tools/list` returns (tests/integration/surface.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.domain.envelope import ResourceEnvelope
from fedhpc.mcp_server import build_server
from fedhpc.settings.daemon import DaemonSettings
from tests.integration.daemon_util import start, stop
from tests.integration.surface import (
    ENVELOPE,
    SUBMITS,
    Tally,
    args_for,
    call,
    harmless,
    normal_task_placed,
    settle,
)

EXAMPLES = 80  # per tool; benchmarks/isolation.py runs hundreds


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[BlockingPortal, Client, DaemonClient, dict[str, Any]]]:
    base = tmp_path_factory.mktemp("surface")
    proc = start(base / "h", FEDHPC_DEVFED="process", FEDHPC_DEVFED_DIR=str(base / "fed"))
    daemon_settings = DaemonSettings.from_env(home=base / "h")
    try:
        with start_blocking_portal() as portal:
            daemon = portal.wrap_async_context_manager(DaemonClient(daemon_settings))
            with daemon as d:
                portal.call(d.wait_until_up, 60)
                portal.call(d.refresh)
                mcp = Client(build_server(daemon_settings, autostart=False), mode="legacy")
                with portal.wrap_async_context_manager(mcp) as client:
                    tools = portal.call(client.list_tools).tools
                    schemas = {t.name: t.input_schema for t in tools}
                    yield portal, client, d, schemas
    finally:
        stop(proc)


@pytest.mark.parametrize("tool", SUBMITS)
def test_every_schema_valid_submit_is_a_typed_error_or_a_task_that_settles(
    world: tuple[BlockingPortal, Client, DaemonClient, dict[str, Any]], tool: str
) -> None:
    portal, client, daemon, schemas = world
    tally = Tally()

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,  # the same inputs every run: a failure here is reproducible
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(args=args_for(schemas[tool]))
    def submit(args: dict[str, Any]) -> None:
        portal.call(call, client, tool, harmless(tool, args), tally)

    submit()
    portal.call(settle, daemon, tally)
    assert tally.internal == [], tally.internal[:3]
    assert tally.stuck == [], tally.stuck[:5]
    assert tally.tried >= EXAMPLES
    assert sum(tally.typed.values()) > 0  # the generator does reach the door's refusals
    # Whatever came before, the next session's plain task is placed.
    assert portal.call(normal_task_placed, client, daemon, f"after-{tool}")


def test_the_generated_arguments_follow_the_published_schema(
    world: tuple[BlockingPortal, Client, DaemonClient, dict[str, Any]],
) -> None:
    _, _, _, schemas = world
    seen: list[dict[str, Any]] = []

    @settings(max_examples=30, deadline=None, derandomize=True)
    @given(args=args_for(schemas["submit_task"]), extra=st.just(None))
    def collect(args: dict[str, Any], extra: None) -> None:
        seen.append(args)

    collect()
    assert set(ENVELOPE["properties"]) == set(ResourceEnvelope.model_fields)
    allowed = set(schemas["submit_task"]["properties"])
    required = set(schemas["submit_task"].get("required", ()))  # none: command or a script
    assert {"command", "envelope", "script"} <= allowed
    assert len(seen) > 1 and any("command" in args for args in seen)
    for args in seen:
        assert required <= set(args) <= allowed
        if "command" in args:
            assert isinstance(args["command"], list) and args["command"]
