"""The facade's token revocation endpoint (RFC 7009), open to public clients."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from mcp.server.auth.middleware.client_auth import AuthenticationError, ClientAuthenticator
from mcp.server.auth.provider import AccessToken, OAuthAuthorizationServerProvider, RefreshToken
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

__all__ = ["Revocation"]

_NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}


class Revocation:
    """The SDK's revocation handler without its defect: its form model requires a
    `client_secret` field, so a public client (PKCE, no secret: what MCP clients register as)
    sending only `client_id` and `token`, as RFC 7009 2.1 has it, was refused with 400. Client
    authentication stays the SDK's (`ClientAuthenticator`, which knows `none`)."""

    def __init__(self, provider: OAuthAuthorizationServerProvider[Any, Any, Any]) -> None:
        self.provider = provider
        self.authenticator = ClientAuthenticator(provider)

    async def handle(self, request: Request) -> Response:
        try:
            client = await self.authenticator.authenticate_request(request)
        except AuthenticationError as exc:  # RFC 6749 5.2
            return JSONResponse(
                {"error": "invalid_client", "error_description": exc.message},
                status_code=401,
                headers=_NO_STORE,
            )
        form = await request.form()
        token = form.get("token")
        if not isinstance(token, str) or not token:
            return JSONResponse(
                {"error": "invalid_request", "error_description": "token is required"},
                status_code=400,
                headers=_NO_STORE,
            )
        loaders: list[Callable[[str], Awaitable[AccessToken | RefreshToken | None]]] = [
            self.provider.load_access_token,
            partial(self.provider.load_refresh_token, client),
        ]
        if form.get("token_type_hint") == "refresh_token":
            loaders.reverse()
        found: AccessToken | RefreshToken | None = None
        for loader in loaders:
            found = await loader(token)
            if found is not None:
                break
        # Another client's token, or none at all, is answered 200 the same (RFC 7009 2.2).
        if found is not None and found.client_id == client.client_id:
            await self.provider.revoke_token(found)
        return Response(status_code=200, headers=_NO_STORE)
