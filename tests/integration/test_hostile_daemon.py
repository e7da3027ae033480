"""A real daemon under hostile input: typed errors with their class's status (never 500),
property-based bodies at the REST boundary, and inspect_federation kept responsive while
pathological requests are in flight; `fedhpc serve` answers a 100,000-deep request."""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.domain.units import MAX_GROUP_CHILDREN
from fedhpc.settings.daemon import DaemonSettings
from tests.integration.daemon_util import start, stop
from tests.integration.mcp_support import RawSession
from tests.integration.test_mcp_http import _start as _start_http

pytestmark = pytest.mark.devfed

TYPED_STATUSES = {400, 404, 409, 413, 422, 503}


@pytest.fixture(scope="module")
def daemon(
    tmp_path_factory: pytest.TempPathFactory, devfed: Any
) -> Iterator[tuple[httpx2.Client, Path, subprocess.Popen[bytes]]]:
    home = tmp_path_factory.mktemp("hostile") / "home"
    proc = start(home)
    sock = DaemonSettings.from_env(home=home).socket_path

    async def up() -> None:
        async with DaemonClient(DaemonSettings.from_env(home=home)) as client:
            await client.wait_until_up(60)
            await client.refresh()

    try:
        anyio.run(up)
        transport = httpx2.HTTPTransport(uds=str(sock))
        with httpx2.Client(transport=transport, base_url="http://fedhpc", timeout=60) as http:
            yield http, sock, proc
    finally:
        stop(proc)


def _typed(resp: httpx2.Response) -> dict[str, Any]:
    body: dict[str, Any] = resp.json()
    assert resp.status_code != 500, body
    if resp.status_code >= 400:
        assert resp.status_code in TYPED_STATUSES, (resp.status_code, body)
        assert all(isinstance(body.get(k), str) for k in ("code", "message", "hint")), body
    return body


DEEP = b'{"command":["true"],"envelope":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
CASES: list[tuple[str, str, str, Any, int, str]] = [
    ("unknown task", "GET", "/v1/tasks/nosuchtask", None, 404, "not_found"),
    ("unknown transfer", "GET", "/v1/transfers/nosuchtransfer", None, 404, "not_found"),
    (
        "bad data ref",
        "POST",
        "/v1/transfers",
        {"source": "no-colon", "destination": "devdelta:scratch/x"},
        422,
        "",
    ),
    (
        "unknown site",
        "POST",
        "/v1/transfers",
        {"source": "nosite:scratch/a", "destination": "devdelta:scratch/b"},
        404,
        "unknown_site",
    ),
    (
        "path traversal",
        "POST",
        "/v1/transfers",
        {"source": "devdelta:scratch/../../etc/passwd", "destination": "devdelta:scratch/b"},
        422,
        "",
    ),
    ("body over 1 MB", "POST", "/v1/tasks", b"{" + b" " * 1_000_001 + b"}", 413, "too_large"),
    (
        "inf memory",
        "POST",
        "/v1/tasks",
        b'{"command":["true"],"envelope":{"memory":{"min":1e400}}}',
        422,
        "validation",
    ),
    (
        "NaN budget",
        "POST",
        "/v1/tasks",
        b'{"command":["true"],"envelope":{},"task_budget":NaN}',
        422,
        "validation",
    ),
    (
        "400-digit wall time",
        "POST",
        "/v1/tasks",
        {"command": ["true"], "envelope": {"wall_time": {"min": "9" * 400 + "h"}}},
        422,
        "validation",
    ),
    ("100,000-deep JSON", "POST", "/v1/tasks", DEEP, 422, "validation"),
    ("not JSON", "POST", "/v1/tasks", b"{", 422, "validation"),
    (
        "draft over the description cap",
        "POST",
        "/v1/envelopes/draft",
        {"description": "x" * 8001},
        422,
        "validation",
    ),
    ("events page over the cap", "GET", "/v1/events?limit=100000", None, 422, "validation"),
    (
        "group over the children cap",
        "POST",
        "/v1/groups",
        {
            "objective": "x",
            "envelope": {},
            "children": [{"command": ["true"]}] * (MAX_GROUP_CHILDREN + 1),
        },
        422,
        "validation",
    ),
]


@pytest.mark.parametrize(
    ("label", "method", "path", "body", "status", "code"), CASES, ids=[c[0] for c in CASES]
)
def test_a_typed_error_answers_with_its_class_status_never_500(
    daemon: tuple[httpx2.Client, Path, Any],
    label: str,
    method: str,
    path: str,
    body: Any,
    status: int,
    code: str,
) -> None:
    http = daemon[0]
    content = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    resp = http.request(method, path, content=content)
    answer = _typed(resp)
    assert resp.status_code == status, (label, answer)
    if code:
        assert answer["code"] == code, answer
    if status == 422 and answer["code"] == "validation":
        assert answer["fields"] and all(f["field"] for f in answer["fields"]), answer


def test_huge_numbers_in_a_draft_come_back_valid_false(
    daemon: tuple[httpx2.Client, Path, Any],
) -> None:
    resp = daemon[0].post(
        "/v1/envelopes/draft", json={"description": "9" * 400 + " hours of training"}
    )
    answer = _typed(resp)
    assert resp.status_code == 200
    assert answer["valid"] is False and answer["issues"][0]["field"].startswith("wall_time")


_NUMBER = st.one_of(
    st.floats(),
    st.integers(min_value=-(10**50), max_value=10**50),
    st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 1e308, "9" * 400, "1e400", "inf"]),
)
_TEXT = st.text(st.characters(codec="utf-8"), max_size=200) | st.sampled_from(
    ["\u202egpu 4", "x\x00y", "t\u043erchrun", "\uff14 hours", "9" * 5000, "a" * 9000]
)
_RANGE = st.fixed_dictionaries({"min": _NUMBER}, optional={"max": _NUMBER})
_ENVELOPE = st.fixed_dictionaries(
    {},
    optional={
        "gpus": _RANGE,
        "cpus": _RANGE,
        "memory": _RANGE | _TEXT,
        "nodes": _RANGE,
        "wall_time": _RANGE | _TEXT,
        "min_accelerator_memory_gib": _NUMBER,
        "accelerator_types": st.lists(_TEXT, max_size=3),
    },
)


@given(
    description=_TEXT,
    code=st.lists(_TEXT, max_size=3),
    proposed=st.none() | _ENVELOPE,
    confidence=st.none() | _NUMBER,
)
@settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_any_draft_request_gets_a_draft_or_a_typed_error(
    daemon: tuple[httpx2.Client, Path, Any],
    description: str,
    code: list[str],
    proposed: Any,
    confidence: Any,
) -> None:
    body = {
        "description": description,
        "code_context": code,
        "proposed": proposed,
        "confidence": confidence,
    }
    resp = daemon[0].post("/v1/envelopes/draft", content=json.dumps(body).encode())
    answer = _typed(resp)
    if resp.status_code == 200:
        assert answer["valid"] == (answer["envelope"] is not None)


@given(envelope=_ENVELOPE, budget=st.none() | _NUMBER, name=st.none() | _TEXT)
@settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_any_hostile_submit_gets_a_typed_answer_and_places_nothing(
    daemon: tuple[httpx2.Client, Path, Any], envelope: dict[str, Any], budget: Any, name: Any
) -> None:
    # Only a site that does not exist is allowed: whatever the numbers, nothing may run.
    envelope = {**envelope, "sites_include": ["nosuchsite"]}
    body = {"command": ["true"], "envelope": envelope, "task_budget": budget, "name": name}
    resp = daemon[0].post("/v1/tasks", content=json.dumps(body).encode())
    answer = _typed(resp)
    assert resp.status_code != 200 or answer.get("site") is None, answer


def _latencies(http: httpx2.Client, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        resp = http.get("/v1/federation")
        out.append(time.perf_counter() - t0)
        assert resp.status_code == 200
        time.sleep(0.005)
    return out


def test_pathological_requests_in_flight_do_not_stall_inspect_federation(
    daemon: tuple[httpx2.Client, Path, subprocess.Popen[bytes]],
) -> None:
    """The issue's bound is 100 ms of added delay (benchmarks/hostile.py prints the p99 under
    attack); the test allows more for the p99 of a shared two-core machine, where other test
    runs also take the CPU, and checks the median's added delay against 100 ms."""
    http, sock, proc = daemon
    idle = _latencies(http, 100)
    with subprocess.Popen(
        [sys.executable, "-m", "tests.integration.hostile_flood", str(sock), "3"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as flood:
        assert flood.stdin is not None
        assert flood.stdout is not None
        assert flood.stdout.readline().strip() == "ready"
        time.sleep(1.0)  # every hostile client has requests in flight
        loaded = _latencies(http, 200)
        flood.stdin.write("stop\n")
        flood.stdin.flush()
        counts: dict[str, list[int]] = json.loads(flood.stdout.readline())
        flood.wait(timeout=60)
    loaded.sort()
    p99 = loaded[int(0.99 * len(loaded)) - 1]
    added = statistics.median(loaded) - statistics.median(idle)
    idle_ms, loaded_ms = statistics.median(idle) * 1000, statistics.median(loaded) * 1000
    print(
        f"inspect_federation median idle {idle_ms:.1f} ms, under attack {loaded_ms:.1f} ms "
        f"(p99 {p99 * 1000:.1f} ms)"
    )
    assert added < 0.100, f"median delayed by {added * 1000:.0f} ms"
    assert p99 < 0.500, f"p99 {p99 * 1000:.0f} ms"
    assert set(counts) >= {"draft at limits", "deep JSON", "invalid 1000-child group"}
    assert all(500 not in statuses for statuses in counts.values()), counts
    assert set(counts["draft at limits"]) == {200}
    assert set(counts["2 MB body"]) == {413}
    assert proc.poll() is None and http.get("/v1/health").status_code == 200


def test_serve_answers_a_100000_deep_request_and_keeps_serving(tmp_path: Path) -> None:
    raw = RawSession(tmp_path / "h", "--no-autostart")
    raw.initialize()
    deep = (
        '{"jsonrpc":"2.0","method":"tools/call","params":{"name":"cancel","arguments":'
        '{"task_id":' + "[" * 100_000 + "]" * 100_000 + '}},"id":41}'
    )
    huge = (
        '{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"cancel",'
        '"arguments":{"task_id":"' + "x" * 4_100_000 + '"}}}'
    )
    for rid, line in ((41, deep), (42, huge)):
        raw.send(line)
        answer = raw.receive(timeout=20)
        assert answer is not None, f"request {rid}: no answer (the caller would wait forever)"
        assert answer["id"] == rid and answer["error"]["code"] == -32600
    after = raw.request(99, "tools/call", {"name": "get_result", "arguments": {"task_id": ""}})
    assert after["result"]["isError"] is True
    assert raw.close() == 0


_HTTP_HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
}


def test_mcp_over_http_answers_deep_surrogate_and_oversized_bodies(tmp_path: Path) -> None:
    proc, port = _start_http(tmp_path / "h")
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        deep = (
            '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"cancel",'
            '"arguments":{"task_id":' + "[" * 100_000 + "]" * 100_000 + "}}}"
        )
        surrogate = (
            '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":'
            '"cancel","arguments":{"task_id":"\\ud800"}}}'
        )
        huge = b'{"jsonrpc":"2.0","id":3,"method":"ping","params":{"s":"' + b"x" * 4_100_000
        with httpx2.Client(timeout=30) as http:
            for body in (deep.encode(), surrogate.encode(), huge + b'"}}'):
                resp = http.post(url, content=body, headers=_HTTP_HEADERS)
                assert resp.status_code in {400, 413}, resp.text[:300]
                assert resp.json()["error"]["code"] in {-32700, -32600, -32602}
            init = {
                "jsonrpc": "2.0",
                "id": 9,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "0"},
                },
            }
            ok = http.post(url, json=init, headers=_HTTP_HEADERS)
            assert ok.status_code == 200, ok.text[:300]
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
