"""The two transports: stdio with a request guard, and streamable HTTP with a bearer token.

mcp 2.3.0's stdio server drops every line it cannot decode without answering (a request nested
deeper than ~195 levels, an escaped lone surrogate, a wrong envelope), so the caller waits
forever. `GuardedStdin` decodes each line first, answers what it cannot pass on with a
JSON-RPC error carrying the request's id, and hands the SDK only lines it can decode. The id is
found by a linear scan when Python's own parser gives up (100,000 levels deep), and a line over
`MAX_MESSAGE_BYTES` is refused unread by the SDK. Over HTTP the SDK answers undecodable bodies
itself; `BodyLimit` refuses oversized ones before they are read."""

from __future__ import annotations

import hmac
import io
import ipaddress
import json
import os
import re
from collections.abc import AsyncIterator
from typing import IO, Any, cast

import anyio
import structlog
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types import (
    INVALID_REQUEST,
    ErrorData,
    JSONRPCError,
    jsonrpc_message_adapter,
)
from pydantic import ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from fedhpc.errors import UsageError
from fedhpc.mcp_server import lowlevel
from fedhpc.settings import MCP_TOKEN

__all__ = [
    "MAX_MESSAGE_BYTES",
    "MIN_TOKEN_CHARS",
    "BearerGuard",
    "BodyLimit",
    "GuardedStdin",
    "check_token",
    "is_loopback",
    "run_http",
    "run_stdio",
]

log = structlog.get_logger(__name__)

# One JSON-RPC message: tool arguments are small (the daemon caps its own bodies at 1 MB).
MAX_MESSAGE_BYTES = 4_000_000

# JSON tokens for the fallback scan: a string (escapes kept whole), a bracket or separator, or
# a bare scalar. Linear: no token pattern can backtrack across another.
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]:,]|[^\s{}\[\]:,"]+')
_INT = re.compile(r"-?(?:0|[1-9]\d{0,17})")


def _scan_id(line: str) -> int | str | None:
    """The top-level "id" of a request too deep for Python's parser, in one linear pass: only
    keys and scalar values at depth 1 matter, everything deeper is skipped token by token."""
    depth, key, after_colon, is_request = 0, None, False, False
    rid: int | str | None = None
    for m in _TOKEN.finditer(line):
        tok = m.group()
        if tok in "{[":
            depth += 1
            after_colon = False
        elif tok in "}]":
            depth -= 1
        elif depth != 1 or tok == ",":
            after_colon = False
            key = None if depth == 1 else key
        elif tok == ":":
            after_colon = True
        elif not after_colon:
            key = tok
        else:
            if key == '"method"':
                is_request = True
            elif key == '"id"':
                rid = _scalar_id(tok)
            after_colon = False
    return rid if is_request else None


def _scalar_id(tok: str) -> int | str | None:
    if _INT.fullmatch(tok):
        return int(tok)
    if tok.startswith('"'):
        try:
            value = json.loads(tok)
        except ValueError:
            return None
        return value if isinstance(value, str) else None
    return None


def _request_id(line: str) -> int | str | None:
    """The id of a request the SDK could not decode: from Python's parser when it can read the
    line, else from a linear scan (a request nested deeper than Python's recursion limit)."""
    try:
        message = json.loads(line)
    except RecursionError:
        return _scan_id(line)
    except ValueError:
        return None
    if not isinstance(message, dict) or "method" not in message:
        return None  # a notification, a response, or not an envelope: nobody waits
    rid = message.get("id")
    if isinstance(rid, bool) or not isinstance(rid, int | str):
        return None
    return rid


def _reason(exc: ValidationError) -> str:
    first = exc.errors(include_url=False, include_input=False)[0]
    return str(first["msg"])[:200]


class GuardedStdin:
    """An async line source for `stdio_server(stdin=...)` that answers undecodable requests."""

    def __init__(self, lines: AsyncIterator[str]) -> None:
        self._lines = lines
        self._reply: Any = None  # the SDK's write stream, attached once it exists
        self._ready = anyio.Event()
        self.answered = 0

    def attach(self, write_stream: Any) -> None:
        """Where error answers go: the transport's write stream, shared with the server."""
        self._reply = write_stream
        self._ready.set()

    def __aiter__(self) -> GuardedStdin:
        return self

    async def __anext__(self) -> str:
        async for line in self._lines:
            if not line.strip():
                continue
            if len(line) > MAX_MESSAGE_BYTES:
                await self._refuse(line, f"message over {MAX_MESSAGE_BYTES} bytes")
                continue
            try:
                jsonrpc_message_adapter.validate_json(line, by_name=False)
            except ValidationError as exc:
                await self._refuse(line, _reason(exc))
                continue
            return line
        raise StopAsyncIteration

    async def _refuse(self, line: str, reason: str) -> None:
        rid = _request_id(line)
        log.warning("undecodable message", bytes=len(line), answered=rid is not None)
        if rid is None:
            return
        # Its id could be read, so it is JSON the SDK cannot take (too deep, too large, a lone
        # surrogate, or not a JSON-RPC envelope): an invalid request, not a parse error.
        error = ErrorData(code=INVALID_REQUEST, message=f"request refused: {reason}")
        await self._ready.wait()
        assert self._reply is not None
        await self._reply.send(SessionMessage(JSONRPCError(jsonrpc="2.0", id=rid, error=error)))
        self.answered += 1


def _take_stdin() -> IO[bytes]:
    """The wire's stdin as a private descriptor; fd 0 then reads /dev/null, so children and
    stray reads cannot steal protocol bytes (what the SDK does when it owns stdin)."""
    wire = os.dup(0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return os.fdopen(wire, "rb", closefd=True)


async def _lines(raw: IO[bytes]) -> AsyncIterator[str]:
    text = io.TextIOWrapper(raw, encoding="utf-8", errors="replace")
    async for line in anyio.wrap_file(text):
        yield line


async def run_stdio(server: MCPServer[Any]) -> None:
    """Serve one client on stdin/stdout (the SDK diverts fd 1 to stderr while serving)."""
    guard = GuardedStdin(_lines(_take_stdin()))
    async with stdio_server(stdin=cast(Any, guard)) as (read_stream, write_stream):
        guard.attach(write_stream)
        await lowlevel.run(server, read_stream, write_stream)  # no public "run on these"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


MIN_TOKEN_CHARS = 32  # secrets.token_urlsafe(32) gives 43


def check_token(token: str) -> str:
    """`token` when it can guard a server: at least MIN_TOKEN_CHARS visible characters (a
    1-character token was accepted, and is guessed in a few dozen requests); UsageError with
    how to make one otherwise."""
    problem = ""
    if len(token) < MIN_TOKEN_CHARS:
        problem = f"has {len(token)} characters; at least {MIN_TOKEN_CHARS} are needed"
    elif not token.isprintable() or any(c.isspace() for c in token):
        problem = "holds spaces or control characters, which an Authorization header cannot carry"
    if problem:
        raise UsageError(
            f"{MCP_TOKEN.name} {problem}",
            hint=f"Make a random one: export {MCP_TOKEN.name}=$(python3 -c 'import secrets; "
            "print(secrets.token_urlsafe(32))'), and give the same value to the client.",
        )
    return token


class BearerGuard:
    """ASGI middleware: every HTTP request needs `Authorization: Bearer <token>`. The scheme
    is case-insensitive and may be followed by more than one space (RFC 9110, 11.1 and 11.4);
    the token is compared in constant time."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._token = token.encode()

    def _admits(self, given: bytes) -> bool:
        scheme, _, credentials = given.partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(
            credentials.lstrip(b" "), self._token
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self._admits(dict(scope.get("headers", [])).get(b"authorization", b"")):
            await self.app(scope, receive, send)
            return
        body = b'{"error":"unauthorized","hint":"send Authorization: Bearer $FEDHPC_MCP_TOKEN"}'
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", b"Bearer"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """ASGI middleware: an HTTP body over `limit` bytes is refused (413, a JSON-RPC error)
    before the SDK reads it into memory; a declared Content-Length is checked first."""

    def __init__(self, app: ASGIApp, limit: int = MAX_MESSAGE_BYTES) -> None:
        self.app = app
        self.limit = limit

    async def _too_large(self, send: Send) -> None:
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": None,
                "error": {"code": INVALID_REQUEST, "message": f"body over {self.limit} bytes"},
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            await self._too_large(send)
            return
        # Read the body here, bounded, and hand the SDK the same bytes as one message.
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await self._too_large(send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def run_http(server: MCPServer[Any], host: str, port: int, token: str | None) -> None:
    """Streamable HTTP at /mcp. Loopback needs no token; any other address refuses to start
    without one. A token, once given, is checked on loopback too."""
    # startup: the web server only for the HTTP transport, not stdio
    import uvicorn

    if not is_loopback(host) and not token:
        raise UsageError(
            f"refusing to serve MCP on {host} without a bearer token",
            hint="Set FEDHPC_MCP_TOKEN to a long random secret (python3 -c 'import secrets; "
            "print(secrets.token_urlsafe(32))'), or serve on 127.0.0.1.",
        )
    if token is not None:
        check_token(token)
    app: ASGIApp = BodyLimit(server.streamable_http_app(host=host))
    if token:
        app = BearerGuard(app, token)
    config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False)
    log.warning("serving MCP over streamable HTTP", url=f"http://{host}:{port}/mcp")
    await uvicorn.Server(config).serve()
