"""Service mode of `serve --http`: the SDK's resource-server stack plus fedhpc's scope guard.

The SDK serves the protected-resource metadata (RFC 9728), answers 401 with
`WWW-Authenticate: Bearer resource_metadata=...` and 403 for a missing required scope, and hands
each request's verified token to the handlers. This module adds the per-tool scopes
(`fedhpc.service.access`): a 403 scope challenge at the HTTP layer (`ScopeChallenge`), the
same refusal as a typed tool error inside the MCP server (`scope_guard`), the metadata's
sign-in scopes, and the HTTP server around it."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

import structlog
from mcp.server.auth.handlers.metadata import MetadataHandler
from mcp.server.auth.routes import (
    build_metadata,
    build_resource_metadata_url,
    cors_middleware,
    create_auth_routes,
    create_protected_resource_routes,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.auth import OAuthMetadata
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_REQUEST
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fedhpc.client.wire import ACTING_FOR
from fedhpc.mcp_server.results import error_result
from fedhpc.mcp_server.transport import BodyLimit
from fedhpc.service import (
    SCOPES,
    SIGN_IN_SCOPES,
    Caller,
    InsufficientScope,
    ServiceAuth,
    caller_of,
    needed_scope,
)
from fedhpc.service.access import ADMIN, READ
from fedhpc.service.revocation import Revocation

__all__ = ["ScopeChallenge", "caller", "facade_metadata", "run_service_http", "scope_guard"]

log = structlog.get_logger(__name__)

_AS_METADATA_PATH = "/.well-known/oauth-authorization-server"
_REVOKE_PATH = "/revoke"
# Client authentication at /token and /revoke: the SDK's two for confidential clients, and
# `none` for public ones (PKCE, no secret: what MCP clients register as, and accepted there).
_CLIENT_AUTH = ["client_secret_post", "client_secret_basic", "none"]


def caller(ctx: Context[Any, Any]) -> Caller | None:
    """The signed-in caller of a tool call (service mode); None over stdio or a shared token."""
    return caller_of(ctx.request_context.request)


async def scope_guard(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Refuse a request whose caller lacks the scope it needs: a tool call gets the typed
    `insufficient_scope` result, any other method a JSON-RPC error carrying the same body."""
    who = caller_of(ctx.request)
    scope, what = needed_scope(ctx.method, ctx.params)
    if who is not None and who.may(scope):
        # Every daemon call of this request is made for this person (owner, admin).
        token = ACTING_FOR.set((f"{who.issuer}|{who.subject}", ADMIN in who.scopes))
        try:
            return await call_next(ctx)
        finally:
            ACTING_FOR.reset(token)
    if who is None and scope == READ:
        return await call_next(ctx)  # the HTTP layer already required READ of every request
    # No verified caller on a call that acts: fail closed (the HTTP layer should never let
    # one through, but a transport path without the request must not open the tools).
    refusal = (
        who.refuse(scope, what)
        if who is not None
        else InsufficientScope(f"{what} needs a signed-in caller with {scope}")
    )
    log.info("call refused for its scope", method=ctx.method, needs=scope, sub=who and who.subject)
    if ctx.method == "tools/call":
        return error_result(refusal)
    raise MCPError(code=INVALID_REQUEST, message=refusal.message, data=refusal.as_dict())


class ScopeChallenge:
    """ASGI middleware inside the SDK's authentication: a tools/call (or Tasks method) whose
    signed-in caller lacks the scope it needs gets `403` with `WWW-Authenticate: Bearer
    error="insufficient_scope", scope="...", resource_metadata="..."` (MCP authorization's
    scope challenge), so an OAuth client can ask the person for the extra scope and retry
    (step-up); the body carries the same refusal as the typed tool error."""

    def __init__(self, app: ASGIApp, resource_metadata_url: str) -> None:
        self.app = app
        self.metadata_url = resource_metadata_url

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        who = caller_of(_Scoped(scope))
        if scope["type"] != "http" or scope.get("method") != "POST" or who is None:
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:  # BodyLimit, outside, already bounded and joined it
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        missing = _missing_scope(who, body)
        if missing is not None:
            await self._challenge(send, who, *missing)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _challenge(
        self, send: Send, who: Caller, needed: str, what: str, request_id: object
    ) -> None:
        refusal = who.refuse(needed, what)
        log.info("call refused for its scope", needs=needed, sub=who.subject, http=403)
        # What it holds plus what it lacks: a client that does not union scopes itself keeps
        # the ones it had (MCP authorization, scope challenge).
        wanted = " ".join(sorted({READ, needed} | (who.scopes & set(SCOPES))))
        header = (
            f'Bearer error="insufficient_scope", scope="{wanted}", '
            f'resource_metadata="{self.metadata_url}", error_description="{what} needs {needed}"'
        )
        # A JSON-RPC error as the body: the SDK's client hands it to the caller as the call's
        # error (message, and data = {code, message, hint}) when it does not step up itself.
        rid = request_id if isinstance(request_id, int | str) else None
        error = {"code": INVALID_REQUEST, "message": refusal.message, "data": refusal.as_dict()}
        data = json.dumps({"jsonrpc": "2.0", "id": rid, "error": error}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 403,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", header.encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": data})


class _Scoped:
    """An ASGI scope seen as a request (`caller_of` reads `.scope`)."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope


def _missing_scope(who: Caller, body: bytes) -> tuple[str, str, object] | None:
    """(scope, what, request id) of the first message in `body` needing a scope `who` lacks;
    None when none does (or the body is not JSON-RPC: the SDK answers that)."""
    try:
        decoded = json.loads(body)
    except ValueError:
        return None
    messages = decoded if isinstance(decoded, list) else [decoded]
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("method"), str):
            continue
        params = message.get("params")
        needed, what = needed_scope(message["method"], params if isinstance(params, dict) else None)
        if not who.may(needed):
            return needed, what, message.get("id")
    return None


def _advertise_scopes(app: Starlette, resource: AnyHttpUrl, auth: ServiceAuth) -> None:
    """Replace the SDK's protected-resource metadata route with one (built by the SDK's own
    function) whose `scopes_supported` is SIGN_IN_SCOPES."""
    [route] = create_protected_resource_routes(
        resource_url=resource,
        authorization_servers=[auth.settings.issuer_url],
        scopes_supported=list(SIGN_IN_SCOPES),
    )
    path = getattr(route, "path", None)
    app.router.routes[:] = [
        route,
        *(r for r in app.router.routes if getattr(r, "path", None) != path),
    ]


def facade_metadata(settings: AuthSettings) -> OAuthMetadata:
    """The facade's RFC 8414 metadata: the SDK's, plus what the facade does that the SDK's
    defaults leave out: public clients (`none`), and the `iss` every authorization response
    carries (RFC 9207), advertised so that a client rejects a response without it (mix-up)."""
    metadata = build_metadata(
        settings.issuer_url,
        settings.service_documentation_url,
        settings.client_registration_options or ClientRegistrationOptions(),
        settings.revocation_options or RevocationOptions(),
    )
    return metadata.model_copy(
        update={
            "token_endpoint_auth_methods_supported": list(_CLIENT_AUTH),
            "revocation_endpoint_auth_methods_supported": (
                list(_CLIENT_AUTH) if metadata.revocation_endpoint else None
            ),
            "authorization_response_iss_parameter_supported": True,
        }
    )


def _serve_facade(app: Starlette, auth: ServiceAuth) -> None:
    """With `[service.facade]`: the authorization server's routes (the SDK's, over the
    facade: RFC 8414 metadata, /register, /authorize, /token, /revoke), fedhpc's /consent (the
    person allows the client) and /callback from the upstream sign-in."""
    if auth.facade is None:
        return
    settings = auth.settings
    sdk = create_auth_routes(
        provider=auth.facade,
        issuer_url=settings.issuer_url,
        client_registration_options=settings.client_registration_options,
        revocation_options=settings.revocation_options,
    )
    # fedhpc's own metadata and revocation in place of the SDK's (`facade_metadata`, `Revocation`)
    own = [
        Route(
            _AS_METADATA_PATH,
            cors_middleware(MetadataHandler(facade_metadata(settings)).handle, ["GET", "OPTIONS"]),
            methods=["GET", "OPTIONS"],
        ),
        Route(
            _REVOKE_PATH,
            cors_middleware(Revocation(auth.facade).handle, ["POST", "OPTIONS"]),
            methods=["POST", "OPTIONS"],
        ),
    ]
    replaced = {_AS_METADATA_PATH, _REVOKE_PATH}
    app.router.routes.extend(
        [
            *own,
            *(r for r in sdk if getattr(r, "path", None) not in replaced),
            Route(urlsplit(auth.facade.callback_url).path, auth.facade.callback, methods=["GET"]),
            Route(
                urlsplit(auth.facade.consent_url).path,
                auth.facade.consent,
                methods=["GET", "POST"],
            ),
        ]
    )


def _security(resource: str, host: str) -> TransportSecuritySettings:
    """DNS-rebinding protection that admits the public name of the resource URL (a reverse
    proxy forwards it as Host) besides the listening address."""
    public = urlsplit(resource)
    hosts = {public.netloc, f"{host}:*", "127.0.0.1:*", "localhost:*", "[::1]:*"}
    origins = {f"{public.scheme}://{public.netloc}", "http://127.0.0.1:*", "http://localhost:*"}
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=sorted(hosts),
        allowed_origins=sorted(origins),
    )


async def run_service_http(server: MCPServer[Any], host: str, port: int, auth: ServiceAuth) -> None:
    """Streamable HTTP at /mcp for signed-in callers only (any address: every request needs a
    token the provider signed for this resource)."""
    # startup: the web server only for the HTTP transport, not stdio
    import uvicorn

    path = urlsplit(auth.config.resource).path or "/mcp"
    security = _security(auth.config.resource, host)
    starlette = server.streamable_http_app(
        streamable_http_path=path, host=host, transport_security=security
    )
    # Innermost of the app's middleware: after the SDK's authentication set the caller.
    resource = auth.settings.resource_server_url
    assert resource is not None  # ServiceAuth always sets it
    metadata_url = str(build_resource_metadata_url(resource))
    _advertise_scopes(starlette, resource, auth)
    _serve_facade(starlette, auth)
    starlette.user_middleware.append(Middleware(ScopeChallenge, resource_metadata_url=metadata_url))
    app: ASGIApp = BodyLimit(starlette)
    config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False)
    log.warning(
        "serving MCP as an OAuth resource server",
        url=f"http://{host}:{port}{path}",
        resource=auth.config.resource,
        issuer=auth.config.issuer,
        facade=auth.facade is not None,
    )
    try:
        await uvicorn.Server(config).serve()
    finally:
        await auth.aclose()
