"""`fedhpc serve` on the wire: the tools/list size budget in real bytes, malformed requests,
and nothing but protocol on stdout. No daemon is needed (the server runs with --no-autostart)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.mcp_support import RawSession

TOTAL_BUDGET = 16 * 1024
MODEL_BUDGET = 6 * 1024  # issue 36: names, descriptions and input schemas of all the tools


@pytest.fixture
def raw(tmp_path: Path) -> Iterator[RawSession]:
    session = RawSession(tmp_path / "h", "--no-autostart")
    session.initialize()
    yield session
    assert session.close() == 0


def _compact(value: object) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def test_tools_list_fits_in_16_kb_and_what_the_model_reads_in_6_kb(raw: RawSession) -> None:
    answer = raw.request(1, "tools/list")
    wire = raw.lines[-1]  # the exact bytes the client received
    tools = answer["result"]["tools"]
    model_reads = sum(
        _compact(
            {"name": t["name"], "description": t["description"], "inputSchema": t["inputSchema"]}
        )
        for t in tools
    )
    print(f"tools/list: {len(wire)} bytes on the wire; model-read part: {model_reads} bytes")
    assert len(wire) < TOTAL_BUDGET
    assert model_reads <= MODEL_BUDGET
    assert all(t["outputSchema"]["properties"] for t in tools)


def test_draft_envelope_states_its_input_limits_where_the_model_reads(raw: RawSession) -> None:
    from fedhpc.placement.draft import MAX_CODE_CONTEXT_ITEMS, MAX_DESCRIPTION_CHARS

    tools = {t["name"]: t for t in raw.request(1, "tools/list")["result"]["tools"]}
    props = tools["draft_envelope"]["inputSchema"]["properties"]
    assert props["description"]["maxLength"] == MAX_DESCRIPTION_CHARS
    assert props["code_context"]["maxItems"] == MAX_CODE_CONTEXT_ITEMS
    assert "chars in all" in props["code_context"]["description"]
    assert props["rationale"]["maxLength"] == 4000
    confidence = json.dumps(props["confidence"])
    assert '"minimum": 0' in confidence and '"maximum": 1' in confidence


def test_stdout_carries_only_json_rpc(raw: RawSession) -> None:
    raw.request(1, "tools/list")
    raw.request(2, "tools/call", {"name": "inspect_federation", "arguments": {}})
    raw.request(3, "resources/list")
    for line in raw.lines:
        assert json.loads(line)["jsonrpc"] == "2.0"


DEEP = "[" * 300 + "]" * 300
MALFORMED = [
    (
        "deep",
        '{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"cancel",'
        f'"arguments":{{"task_id":{DEEP}}}}}}}',
    ),
    (
        "surrogate",
        '{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"cancel",'
        '"arguments":{"task_id":"\\ud800"}}}',
    ),
    ("bad envelope", '{"jsonrpc":"2.0","id":13,"method":42}'),
    ("params not an object", '{"jsonrpc":"2.0","id":14,"method":"tools/call","params":[1]}'),
    (
        "arguments not an object",
        '{"jsonrpc":"2.0","id":15,"method":"tools/call",'
        '"params":{"name":"cancel","arguments":"x"}}',
    ),
]


@pytest.mark.parametrize(("label", "line"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_request_gets_an_error_with_its_id_and_the_server_keeps_serving(
    raw: RawSession, label: str, line: str
) -> None:
    raw.send(line)
    answer = raw.receive(timeout=10)
    assert answer is not None, f"{label}: no answer (the caller would wait forever)"
    assert answer["id"] == json.loads(line)["id"]
    assert answer["error"]["code"] in {-32600, -32602}
    after = raw.request(99, "tools/call", {"name": "get_result", "arguments": {"task_id": ""}})
    assert after["result"]["isError"] is True


def test_garbage_without_an_id_is_ignored_and_the_server_keeps_serving(raw: RawSession) -> None:
    for line in ("not json at all", "{", '{"jsonrpc":"2.0","method":"nope"}', "[]", "\x00\x01"):
        raw.send(line)
    assert raw.request(5, "ping")["result"] == {}
    assert len(raw.lines) == 2  # initialize and the ping: nothing else was answered
