"""Service mode of `serve --http`: the SDK's resource-server stack plus fedhpc's scope guard.

The SDK serves the protected-resource metadata (RFC 9728), answers 401 with
`WWW-Authenticate: Bearer resource_metadata=...` and 403 for a missing required scope, and hands
each request's verified token to the handlers. This module adds the per-tool scopes
(`fedhpc.service.access`) and the HTTP server around it."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import structlog
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_REQUEST
from starlette.types import ASGIApp

from fedhpc.mcp_server.results import error_result
from fedhpc.mcp_server.transport import BodyLimit
from fedhpc.service import Caller, InsufficientScope, ServiceAuth, caller_of, needed_scope
from fedhpc.service.access import READ

__all__ = ["caller", "run_service_http", "scope_guard"]

log = structlog.get_logger(__name__)


def caller(ctx: Context[Any, Any]) -> Caller | None:
    """The signed-in caller of a tool call (service mode); None over stdio or a shared token."""
    return caller_of(ctx.request_context.request)


async def scope_guard(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Refuse a request whose caller lacks the scope it needs: a tool call gets the typed
    `insufficient_scope` result, any other method a JSON-RPC error carrying the same body."""
    who = caller_of(ctx.request)
    scope, what = needed_scope(ctx.method, ctx.params)
    if who is not None and who.may(scope):
        return await call_next(ctx)
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
    app: ASGIApp = BodyLimit(
        server.streamable_http_app(
            streamable_http_path=path,
            host=host,
            transport_security=_security(auth.config.resource, host),
        )
    )
    config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False)
    log.warning(
        "serving MCP as an OAuth resource server",
        url=f"http://{host}:{port}{path}",
        resource=auth.config.resource,
        issuer=auth.config.issuer,
    )
    try:
        await uvicorn.Server(config).serve()
    finally:
        await auth.verifier.aclose()
