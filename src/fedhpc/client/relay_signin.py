"""The relay's own sign-in (`fedhpc relay --sign-in`): the MCP SDK's OAuth client against the
service (discovery, registration, PKCE, the `resource` indicator, refresh), its tokens in a
0600 file of the relay's folder, and the browser's return caught on loopback. Signed in once,
the relay refreshes its token by itself; the person is asked again only when the refresh
token is refused."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import webbrowser
from pathlib import Path
from typing import cast
from urllib.parse import parse_qs, urlsplit

import anyio
import structlog
from anyio.abc import SocketListener, SocketStream
from anyio.streams.stapled import MultiListener
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)

from fedhpc.errors import UsageError

__all__ = ["FileTokens", "sign_in_provider"]

log = structlog.get_logger(__name__)

SIGN_IN_S = 600.0  # how long the relay waits for the browser to come back
_PAGE = b"signed in: fedhpc relay follows your work now; you may close this page\n"


class FileTokens:
    """The SDK's `TokenStorage` in one JSON file, written 0600 (a token is a credential) and
    replaced whole, so a relay killed while writing keeps the previous tokens."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _read(self) -> dict[str, object]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _write(self, key: str, value: dict[str, object]) -> None:
        data = {**self._read(), key: value}
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(data, out)
        tmp.replace(self.path)

    async def get_tokens(self) -> OAuthToken | None:
        got = self._read().get("tokens")
        return OAuthToken.model_validate(got) if isinstance(got, dict) else None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self._write("tokens", tokens.model_dump(mode="json", exclude_none=True))

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        got = self._read().get("client")
        return OAuthClientInformationFull.model_validate(got) if isinstance(got, dict) else None

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self._write("client", client_info.model_dump(mode="json", exclude_none=True))


class _Callback:
    """The browser's return to http://127.0.0.1:<port>/callback, caught once per sign-in."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.redirect_uri = f"http://127.0.0.1:{port}/callback"
        self.listener: MultiListener[SocketStream] | None = None

    async def open(self) -> None:
        """Listen before the URL is shown: a quick browser finds the port open."""
        if self.listener is None:
            self.listener = await anyio.create_tcp_listener(
                local_host="127.0.0.1", local_port=self.port
            )

    async def wait(self) -> AuthorizationCodeResult:
        await self.open()
        listener, self.listener = self.listener, None
        assert listener is not None
        async with listener:
            with anyio.fail_after(SIGN_IN_S):
                while True:
                    stream = await cast(SocketListener, listener.listeners[0]).accept()
                    async with stream:
                        got = await self._answer(stream)
                    if got is not None:
                        return got

    async def _answer(self, stream: SocketStream) -> AuthorizationCodeResult | None:
        head = b""
        with anyio.move_on_after(10):
            while b"\r\n\r\n" not in head and len(head) < 16384:
                head += await stream.receive()
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = line.split()
        query = parse_qs(urlsplit(parts[1]).query) if len(parts) > 1 else {}
        if len(parts) < 2 or not parts[1].startswith("/callback") or "code" not in query:
            await stream.send(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            return None
        body = _PAGE
        await stream.send(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
            + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        first = {k: v[0] for k, v in query.items()}
        return AuthorizationCodeResult(
            code=first["code"], state=first.get("state"), iss=first.get("iss")
        )


def sign_in_provider(service: str, tokens: Path, port: int) -> OAuthClientProvider:
    """An httpx auth for the service: the stored tokens (refreshed as they expire), else a
    sign-in: the URL is printed (and opened in a browser where there is one), and the
    browser's return is caught on `port`."""
    callback = _Callback(port)

    async def redirect(url: str) -> None:
        await callback.open()
        print(f"fedhpc relay: sign in to {service} at:\n  {url}", file=sys.stderr, flush=True)
        log.info("relay sign-in asked", service=service)
        with contextlib.suppress(webbrowser.Error):  # no browser here: the printed URL is the way
            webbrowser.open(url)

    async def returned() -> AuthorizationCodeResult:
        try:
            return await callback.wait()
        except TimeoutError:
            raise UsageError(
                f"nobody signed in within {SIGN_IN_S:.0f} s",
                hint="Open the printed URL in a browser on this machine, then try again.",
            ) from None

    return OAuthClientProvider(
        server_url=service,
        client_metadata=OAuthClientMetadata(
            client_name="fedhpc relay",
            redirect_uris=[callback.redirect_uri],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",  # noqa: S106 (a public client: PKCE, no secret)
        ),
        storage=FileTokens(tokens),
        redirect_handler=redirect,
        callback_handler=returned,
    )
