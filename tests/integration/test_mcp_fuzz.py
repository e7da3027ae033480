"""Fuzz every tool's input (hypothesis, 1,000 cases per tool) through the real MCP client, in
process, against a real daemon: every answer is either a result that matches the tool's output
schema (the client checks it) or a typed `{code, message, hint}` error; never a crash.

The daemon runs without sites (no FEDHPC_DEVFED), so a valid submission is placed nowhere and
no Slurm job is started."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client
from mcp_types import CallToolResult

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.mcp_server import build_server
from fedhpc.settings import FUZZ_CASES
from fedhpc.settings.daemon import DaemonSettings

CASES = int(FUZZ_CASES.get() or 1000)
# `internal` would mean a crash in fedhpc (or an answer it could not read): a bug.
TYPED = {
    "validation",
    "usage",
    "permanent",
    "transient",
    "not_found",
    "unknown_tool",
    "too_large",
    # move_data's reference errors (docs/data.md)
    "bad_data_ref",
    "path_traversal",
    "unknown_site",
    "unknown_root",
    "unknown_collection",
    "unsupported_route",
    # site names and workdirs checked before placement (docs/mcp.md)
    "site_not_usable",
    "workdir_outside",
    # inspect_federation's accelerator, list_events' cursor (docs/errors.md)
    "unknown_accelerator",
    "cursor_ahead",
}

Scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.text(max_size=12),
    st.floats(allow_nan=False, allow_infinity=False),
)
Json = st.recursive(
    Scalar,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=8,
)
Text = st.one_of(
    st.text(max_size=24),
    st.sampled_from(
        [
            "",
            " ",
            "../../etc/passwd",
            "$(touch x)",
            "a" * 300,
            "t_",
            "best-feasible",
            "devdelta",
            "x86_64",
            "a100",
            "2h",
            "64G",
            "stdout",
        ]
    ),
)


def _from_schema(node: dict[str, Any], defs: dict[str, Any], depth: int = 0) -> Any:
    """Values shaped like the schema, with edge values; `_arg` mixes in arbitrary JSON."""
    if "$ref" in node:
        return _from_schema(defs[node["$ref"].split("/")[-1]], defs, depth)
    if "anyOf" in node:
        return st.one_of([_from_schema(b, defs, depth) for b in node["anyOf"]])
    if "enum" in node:
        return st.sampled_from(node["enum"])
    kind = node.get("type")
    if isinstance(kind, list):
        return st.one_of([_from_schema({**node, "type": k}, defs, depth) for k in kind])
    if kind == "string":
        return Text
    if kind == "integer":
        return st.integers(-5, 70000) | st.integers(-(2**63), 2**63)
    if kind == "number":
        return st.floats(-10, 1e6, allow_nan=False) | st.integers(-3, 10)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        return st.lists(_from_schema(node.get("items", {}), defs, depth + 1), max_size=4)
    if kind == "object" and "properties" in node and depth < 4:
        return _object(node, defs, depth + 1)
    return st.dictionaries(Text, Json, max_size=3)


# list_events' `wait_s` waits that long for an event when none is newer: fuzzed as the schema
# allows it, one case could wait 60 s (past the call's 30 s bound). Valid values stay short;
# the invalid ones (negative, past 60, not a number) are fuzzed as everything else is.
WAIT_S = st.one_of(
    st.floats(0, 0.2),
    st.floats(-10, -0.01),
    st.floats(60.01, 1e6),
    st.text(max_size=4),
    st.none(),
    st.booleans(),
)


def _object(node: dict[str, Any], defs: dict[str, Any], depth: int) -> Any:
    props = node["properties"]
    required = set(node.get("required", ()))
    fields = {k: WAIT_S if k == "wait_s" else _arg(v, defs, depth) for k, v in props.items()}
    base = st.fixed_dictionaries(
        {k: fields[k] for k in props if k in required},
        optional={k: fields[k] for k in props if k not in required},
    )
    extra = st.dictionaries(st.text(max_size=8), Json, max_size=1)
    return st.one_of(base, st.builds(lambda a, b: {**b, **a}, base, extra))


def _arg(node: dict[str, Any], defs: dict[str, Any], depth: int = 0) -> Any:
    return st.one_of(_from_schema(node, defs, depth), Json)


def _arguments(schema: dict[str, Any]) -> Any:
    defs = schema.get("$defs", {})
    # Mostly schema-shaped; sometimes the required keys are missing or extra keys come along.
    return st.one_of(_object(schema, defs, 0), st.dictionaries(Text, Json, max_size=4))


def _start_daemon(home: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "FEDHPC_DEVFED"}
    env.update(FEDHPC_HOME=str(home), FEDHPC_REFRESH_S="60", FEDHPC_GRACE_S="1")
    home.mkdir(parents=True)
    with (home.parent / "daemon.log").open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "fedhpc.daemon"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )


@pytest.fixture(scope="module")
def session(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[BlockingPortal, Client, dict[str, Any]]]:
    home = tmp_path_factory.mktemp("fuzz") / "h"
    proc = _start_daemon(home)
    settings_ = DaemonSettings(home=home)
    try:
        with start_blocking_portal() as portal:

            async def up() -> None:
                async with DaemonClient(settings_) as probe:
                    await probe.wait_until_up(30)

            portal.call(up)
            client = Client(build_server(settings_, autostart=False), mode="legacy")
            with portal.wrap_async_context_manager(client) as connected:
                tools = portal.call(connected.list_tools).tools
                schemas = {t.name: t.input_schema for t in tools}
                yield portal, connected, schemas
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


TOOLS = [
    "inspect_federation",
    "draft_envelope",
    "submit_task",
    "submit_group",
    "get_result",
    "replan",
    "cancel",
    "move_data",
    "list_events",
    "ack_events",
]


def _check(tool: str, args: dict[str, Any], result: CallToolResult) -> None:
    if not result.is_error:
        assert result.structured_content is not None, (tool, args)
        return
    assert result.structured_content is None
    body = json.loads(result.content[0].text)  # type: ignore[union-attr]
    assert isinstance(body, dict), (tool, args, body)
    assert all(isinstance(body.get(k), str) for k in ("code", "message", "hint")), body
    assert body["code"] in TYPED, (tool, args, body)
    named = {"validation", "site_not_usable", "workdir_outside", "unknown_accelerator"}
    if body["code"] in named and "fields" in body:
        assert all(f["field"] for f in body["fields"]), body


_STRATEGIES: dict[str, Any] = {}  # tool -> the strategy of its arguments


@pytest.mark.parametrize("tool", TOOLS)
@settings(
    max_examples=CASES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_fuzzed_arguments_get_a_result_or_a_typed_error(
    session: tuple[BlockingPortal, Client, dict[str, Any]], tool: str, data: st.DataObject
) -> None:
    portal, client, schemas = session
    if tool not in _STRATEGIES:  # built once per tool: building it per case cost half the CPU
        _STRATEGIES[tool] = _arguments(schemas[tool])
    args = data.draw(_STRATEGIES[tool], label="arguments")

    async def call() -> CallToolResult:
        with anyio.fail_after(30):
            return await client.call_tool(tool, args)

    _check(tool, args, portal.call(call))
