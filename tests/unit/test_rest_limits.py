"""The daemon's REST server (uvicorn on a real Unix socket, served in process) against clients
that hold connections: one that sends nothing or half a request head is closed once the head's
deadline passes, a half-sent body is answered `body_timeout`, a request being answered is never
cut, and a client that leaves mid-request is logged at info, not as an error."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
import structlog
from anyio.abc import SocketStream
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from fedhpc.daemon import limits, rest
from fedhpc.daemon.app import build_app
from fedhpc.daemon.guard import guard
from fedhpc.daemon.rest import RestServer
from fedhpc.store import Store
from tests.unit.daemon_support import daemon_state


@pytest.fixture(autouse=True)
def short_deadlines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rest, "HEAD_TIMEOUT_S", 0.3)
    monkeypatch.setattr(limits, "BODY_TIMEOUT_S", 0.3)


@asynccontextmanager
async def serving(app: ASGIApp, tmp_path: Path) -> AsyncIterator[Path]:
    path = tmp_path / "d.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.listen(64)
    server = RestServer(app)
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve, [sock])
        with anyio.fail_after(10):
            while not server.started:
                await anyio.sleep(0.01)
        try:
            yield path
        finally:
            server.should_exit = True


async def _closed(stream: SocketStream) -> bytes:
    """Everything the server sends until it closes the connection."""
    got = b""
    with anyio.fail_after(10):
        while True:
            try:
                got += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return got


async def _get(path: Path, target: str) -> bytes:
    async with await anyio.connect_unix(path) as s:
        await s.send(f"GET {target} HTTP/1.1\r\nhost: d\r\nconnection: close\r\n\r\n".encode())
        return await _closed(s)


async def test_connections_that_send_nothing_or_half_a_head_are_closed(
    store: Store, tmp_path: Path
) -> None:
    """300 such clients held 300 connections for over 70 s."""
    async with serving(build_app(daemon_state(store)), tmp_path) as path:
        idle = [await anyio.connect_unix(path) for _ in range(10)]
        half = [await anyio.connect_unix(path) for _ in range(10)]
        for s in half:
            await s.send(b"GET /v1/tasks HTTP/1.1\r\nhost: d\r\n")  # no blank line: no end
        for s in [*idle, *half]:
            assert await _closed(s) == b""
            await s.aclose()
        # After a whole answer, a kept-alive connection gets the same deadline for the next.
        async with await anyio.connect_unix(path) as s:
            await s.send(b"GET /v1/tasks HTTP/1.1\r\nhost: d\r\n\r\nGET /v1/ta")
            answer = await _closed(s)
        assert answer.startswith(b"HTTP/1.1 200") and answer.count(b"HTTP/1.1") == 1
        assert (await _get(path, "/v1/tasks")).startswith(b"HTTP/1.1 200")


async def test_a_half_sent_body_is_answered_body_timeout_and_closed(
    store: Store, tmp_path: Path
) -> None:
    head = "POST /v1/tasks HTTP/1.1\r\nhost: d\r\ncontent-type: application/json\r\n"
    async with serving(build_app(daemon_state(store)), tmp_path) as path:
        s = await anyio.connect_unix(path)
        await s.send(f'{head}content-length: 100\r\n\r\n{{"comm'.encode())
        answer = await _closed(s)
        await s.aclose()
    assert answer.startswith(b"HTTP/1.1 400"), answer
    assert b'"code":"body_timeout"' in answer and b"(6 bytes came)" in answer


async def _slow(_: Request) -> Response:
    await anyio.sleep(0.8)  # longer than the head's deadline: the answer still comes
    return JSONResponse({"ok": True})


async def _echo(request: Request) -> Response:
    return JSONResponse({"n": len(await limits.read_body(request))})


async def test_a_slow_answer_is_not_cut_and_a_client_leaving_is_info_not_error(
    tmp_path: Path,
) -> None:
    """Each client that left mid-request was logged as `request failed` at level error."""
    app = Starlette(
        routes=[Route("/slow", guard(_slow)), Route("/echo", guard(_echo), methods=["POST"])]
    )
    async with serving(app, tmp_path) as path:
        assert (await _get(path, "/slow")).endswith(b'{"ok":true}')
        with structlog.testing.capture_logs() as logs:
            async with await anyio.connect_unix(path) as s:
                await s.send(b"POST /echo HTTP/1.1\r\nhost: d\r\ncontent-length: 100\r\n\r\nab")
                await anyio.sleep(0.05)
            with anyio.fail_after(10):
                while not any(e["event"] == "client disconnected" for e in logs):
                    await anyio.sleep(0.02)
    left = [e for e in logs if e["event"] == "client disconnected"]
    assert [(e["log_level"], e["path"]) for e in left] == [("info", "/echo")]
    assert not [e for e in logs if e["log_level"] in {"error", "critical"}], logs
