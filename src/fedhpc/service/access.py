"""Who is calling (`Caller`), and which scope each MCP tool and method needs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken

from fedhpc.errors import UsageError

__all__ = [
    "ADMIN",
    "DATA",
    "METHOD_SCOPES",
    "READ",
    "SUBMIT",
    "TOOL_SCOPES",
    "Caller",
    "InsufficientScope",
    "caller_from_token",
    "caller_of",
    "needed_scope",
]

READ, SUBMIT, DATA, ADMIN = "fedhpc:read", "fedhpc:submit", "fedhpc:data", "fedhpc:admin"

# Every tool in mcp_server.tools.TOOLS (a unit test keeps the two in step). A tool missing here
# needs `fedhpc:admin`: a new tool is closed until someone decides its scope.
TOOL_SCOPES: Mapping[str, str] = {
    "inspect_federation": READ,
    "draft_envelope": READ,
    "get_result": READ,
    "list_events": READ,
    "ack_events": READ,  # moves the caller's own event cursor; changes no work
    "submit_task": SUBMIT,
    "submit_group": SUBMIT,
    "replan": SUBMIT,
    "cancel": SUBMIT,
    "move_data": DATA,
}

# JSON-RPC methods other than tools/call that change work (the Tasks extension); every other
# method (tools/list, resources/read, tasks/get, subscriptions/listen, ...) needs READ, which
# the HTTP layer already requires of every request.
METHOD_SCOPES: Mapping[str, str] = {"tasks/cancel": SUBMIT, "tasks/update": SUBMIT}


class InsufficientScope(UsageError):
    """The caller's token lacks the scope this tool or method needs."""

    code = "insufficient_scope"


@dataclass(frozen=True, slots=True)
class Caller:
    """The verified identity behind one request: never the token itself.

    `subject` is unique only per `issuer`; `username` is the email (or preferred username) the
    provider vouched for, for people to read, not to key anything on."""

    issuer: str
    subject: str
    username: str | None
    client_id: str
    scopes: frozenset[str]

    def may(self, scope: str) -> bool:
        return scope in self.scopes or ADMIN in self.scopes

    def refuse(self, scope: str, what: str) -> InsufficientScope:
        return InsufficientScope(
            f"{what} needs the scope {scope}; this sign-in granted "
            f"{' '.join(sorted(self.scopes)) or 'none'}",
            hint=f"Sign in again asking for {scope} (your operator decides who may have it).",
        )


def needed_scope(method: str, params: Mapping[str, Any] | None) -> tuple[str, str]:
    """(scope, what) a JSON-RPC request needs beyond READ; READ when nothing more."""
    if method == "tools/call" and params is not None:
        name = params.get("name")
        if isinstance(name, str):
            return TOOL_SCOPES.get(name, ADMIN), f"the tool {name[:64]}"
    return METHOD_SCOPES.get(method, READ), method[:64]


def caller_from_token(token: AccessToken) -> Caller:
    claims = token.claims or {}
    username = claims.get("email") or claims.get("preferred_username")
    return Caller(
        issuer=str(claims.get("iss", "")),
        subject=token.subject or "",
        username=username if isinstance(username, str) else None,
        client_id=token.client_id,
        scopes=frozenset(token.scopes),
    )


def caller_of(request: object | None) -> Caller | None:
    """The caller of an HTTP request the bearer middleware authenticated (a Starlette
    `Request`, as `ctx.request` holds it), else of the current task's auth context; None
    without a signed-in caller (stdio, or `serve --http` with the shared token)."""
    scope = getattr(request, "scope", None)
    user = scope.get("user") if isinstance(scope, Mapping) else None
    if isinstance(user, AuthenticatedUser):
        return caller_from_token(user.access_token)
    token = get_access_token()
    return caller_from_token(token) if token is not None else None
