"""The stdio request guard and the HTTP bearer guard, without a network."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, MutableMapping
from typing import Any

import anyio
import pytest
from mcp.shared.message import SessionMessage

from fedhpc.errors import UsageError
from fedhpc.mcp_server.transport import (
    BearerGuard,
    BodyLimit,
    GuardedStdin,
    check_token,
    is_loopback,
)

PING = '{"jsonrpc":"2.0","id":1,"method":"ping"}'
DEEP = '{"jsonrpc":"2.0","id":2,"method":"ping","params":{"x":' + "[" * 250 + "]" * 250 + "}}"
SURROGATE = '{"jsonrpc":"2.0","id":"s","method":"tools/call","params":{"name":"\\udc00"}}'


async def _lines(*lines: str) -> AsyncIterator[str]:
    for line in lines:
        yield line + "\n"


async def _run(*lines: str) -> tuple[list[str], list[dict[str, Any]]]:
    send, receive = anyio.create_memory_object_stream[SessionMessage](10)
    guard = GuardedStdin(_lines(*lines))
    guard.attach(send)
    passed = [line async for line in guard]
    send.close()
    answers = [json.loads(m.message.model_dump_json(by_alias=True)) async for m in receive]
    receive.close()
    return passed, answers


async def test_decodable_lines_pass_through_unchanged() -> None:
    passed, answers = await _run(PING, '{"jsonrpc":"2.0","method":"notifications/initialized"}')
    assert passed == [PING + "\n", '{"jsonrpc":"2.0","method":"notifications/initialized"}\n']
    assert answers == []


@pytest.mark.parametrize(
    ("line", "rid"),
    [
        (DEEP, 2),
        (SURROGATE, "s"),
        ('{"jsonrpc":"2.0","id":3,"method":7}', 3),
        ('{"jsonrpc":"1.0","id":4,"method":"ping"}', 4),
    ],
)
async def test_an_undecodable_request_is_answered_with_its_id(line: str, rid: Any) -> None:
    passed, answers = await _run(line, PING)
    assert passed == [PING + "\n"]
    (answer,) = answers
    assert answer["id"] == rid
    assert answer["error"]["code"] == -32600
    assert answer["error"]["message"].startswith("request refused")


@pytest.mark.parametrize(
    "line",
    [
        "garbage",
        "{",
        "[]",
        '{"id":5}',
        '{"jsonrpc":"2.0","id":true,"method":7}',
        '{"jsonrpc":"2.0","id":{"a":1},"method":7}',
        '{"jsonrpc":"2.0","method":7}',
        "",
    ],
)
async def test_without_a_usable_id_nothing_is_answered(line: str) -> None:
    passed, answers = await _run(line, PING)
    assert passed == [PING + "\n"]
    assert answers == []


async def _asgi(app: Any, headers: list[tuple[bytes, bytes]]) -> int:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": headers}
    await app(scope, receive, send)
    status: int = sent[0]["status"]
    return status


async def _ok(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ([(b"authorization", b"Bearer s3cret")], 200),
        ([(b"authorization", b"Bearer s3cre")], 401),
        ([(b"authorization", b"Bearer s3cret2")], 401),
        # RFC 9110 11.1: the scheme is case-insensitive ("bearer" was refused); 11.4: 1*SP.
        ([(b"authorization", b"bearer s3cret")], 200),
        ([(b"authorization", b"BEARER  s3cret")], 200),
        ([(b"authorization", b"Bearer S3CRET")], 401),  # the token is not
        ([(b"authorization", b"Basic s3cret")], 401),
        ([(b"authorization", b"Bearers3cret")], 401),
        ([(b"authorization", b"s3cret")], 401),
        ([], 401),
    ],
)
async def test_the_bearer_guard_admits_only_the_exact_token(
    headers: list[tuple[bytes, bytes]], status: int
) -> None:
    assert await _asgi(BearerGuard(_ok, "s3cret"), headers) == status


@pytest.mark.parametrize(
    ("token", "says"),
    [
        ("x", "has 1 characters; at least 32"),
        ("a" * 31, "has 31 characters"),
        ("a" * 20 + " " + "b" * 20, "spaces or control characters"),
        ("a" * 40 + "\n", "spaces or control characters"),
    ],
)
def test_serve_http_refuses_a_short_or_unsendable_token_saying_how_to_make_one(
    token: str, says: str
) -> None:
    """A 1-character FEDHPC_MCP_TOKEN was accepted."""
    with pytest.raises(UsageError) as err:
        check_token(token)
    assert says in err.value.message and "secrets.token_urlsafe(32)" in err.value.hint
    good = secrets.token_urlsafe(32)
    assert check_token(good) == good


async def test_lifespan_events_pass_the_bearer_guard() -> None:
    seen: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["type"])

    await BearerGuard(app, "t")({"type": "lifespan"}, None, None)  # type: ignore[arg-type]
    assert seen == ["lifespan"]


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("10.0.0.5", False),
        ("example.org", False),
    ],
)
def test_loopback_detection(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


VERY_DEEP = (
    '{"jsonrpc":"2.0","method":"tools/call","params":{"x":'
    + "[" * 100_000
    + "]" * 100_000
    + '},"id":"deep"}'
)


@pytest.mark.parametrize(
    ("line", "rid"),
    [
        (VERY_DEEP, "deep"),
        ('{"id":7,"params":' + '{"a":' * 50_000 + "1" + "}" * 50_000 + ',"method":"ping"}', 7),
        ('{"jsonrpc":"2.0","id":8,"method":"ping","params":{"s":"' + "x" * 4_000_001 + '"}}', 8),
    ],
)
async def test_a_request_too_deep_for_any_parser_or_too_large_is_answered(
    line: str, rid: Any
) -> None:
    passed, answers = await _run(line, PING)
    assert passed == [PING + "\n"]
    (answer,) = answers
    assert answer["id"] == rid and answer["error"]["code"] == -32600


@pytest.mark.parametrize(
    "line",
    [
        '{"jsonrpc":"2.0","result":' + "[" * 5000 + "]" * 5000 + ',"id":1}',  # a response
        '{"jsonrpc":"2.0","method":"x","params":' + "[" * 5000 + "]" * 5000 + "}",  # notification
        '{"jsonrpc":"2.0","method":"x","params":{"id":3,"d":' + "[" * 5000 + "]" * 5000 + "}}",
    ],
)
async def test_a_deep_message_nobody_waits_for_gets_no_answer(line: str) -> None:
    passed, answers = await _run(line, PING)
    assert passed == [PING + "\n"] and answers == []


async def _post(body: bytes, declared: bool) -> tuple[int, bytes, bytes]:
    sent: list[MutableMapping[str, Any]] = []
    chunks = [body[i : i + 65536] for i in range(0, len(body), 65536)] or [b""]
    received: list[bytes] = []

    async def receive() -> dict[str, Any]:
        chunk = chunks.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    async def echo(scope: Any, receive_: Any, send_: Any) -> None:
        message = await receive_()
        received.append(message["body"])
        await _ok(scope, receive_, send_)

    headers = [(b"content-length", str(len(body)).encode())] if declared else []
    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": headers}
    await BodyLimit(echo, limit=100_000)(scope, receive, send)
    return sent[0]["status"], sent[1]["body"], b"".join(received)


@pytest.mark.parametrize("declared", [True, False])
async def test_the_http_body_limit_refuses_oversized_bodies_and_passes_others_whole(
    declared: bool,
) -> None:
    status, body, seen = await _post(b"x" * 100_001, declared)
    assert status == 413 and json.loads(body)["error"]["code"] == -32600 and seen == b""
    small = b'{"jsonrpc":"2.0","id":1,"method":"ping"}' * 1000
    status, _, seen = await _post(small, declared)
    assert status == 200 and seen == small
