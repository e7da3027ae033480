"""The facade's consent page (MCP authorization, security best practices: "confused deputy").

fedhpc signs every person in upstream with one static client, and anyone may register an MCP
client with fedhpc. A provider that remembers the person's consent to fedhpc's client would
send a link to /authorize naming an attacker's client straight back through /callback, and
the person's fedhpc code to the attacker's redirect URI. So /authorize first shows this page:
which client (its name and redirect URI) asks for which scopes. Only the person's approval,
posted from the page itself (a double-submit token in a SameSite=Strict cookie: a cross-site
form post carries none), sends them upstream; the page refuses to be framed."""

from __future__ import annotations

import hmac
import secrets
from html import escape
from typing import Any

from mcp.server.auth.provider import AuthorizationParams, construct_redirect_uri
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

__all__ = [
    "CONSENT_PATH",
    "PENDING_TTL_S",
    "cookie_name",
    "denied",
    "page",
    "posted_token",
    "refusal",
]

CONSENT_PATH = "/consent"
PENDING_TTL_S = 900  # a person has this long to approve and sign in upstream
_HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
    "frame-ancestors 'none'",
    "Referrer-Policy": "no-referrer",
}


def cookie_name(own_issuer: str) -> str:
    """`__Host-` (Secure, this host only, path /) behind https; plain on loopback tests."""
    return "__Host-fedhpc-consent" if own_issuer.startswith("https://") else "fedhpc-consent"


def refusal(message: str, status: int) -> HTMLResponse:
    return HTMLResponse(f"<p>{escape(message)}</p>", status_code=status, headers=_HEADERS)


def page(
    own_issuer: str,
    request_id: str,
    client: dict[str, Any],
    params: AuthorizationParams,
    scopes: list[str],
) -> HTMLResponse:
    """The page asking the person, with a fresh double-submit token in the form and cookie."""
    csrf = secrets.token_urlsafe(32)
    name = str(client.get("client_name") or "an unnamed client")
    body = f"""<!doctype html><html><head><meta charset="utf-8"><title>Sign in to fedhpc</title>
</head><body><h1>Allow {escape(name)} to act for you at fedhpc?</h1>
<p>Client <code>{escape(str(client.get("client_id", "")))}</code> asks for
<code>{escape(" ".join(scopes))}</code>. After you sign in, fedhpc sends your authorization to
<code>{escape(str(params.redirect_uri))}</code>. Allow only a client you started yourself.</p>
<form method="post" action="{CONSENT_PATH}">
<input type="hidden" name="request" value="{escape(request_id)}">
<input type="hidden" name="csrf" value="{escape(csrf)}">
<button type="submit" name="decision" value="allow">Allow and sign in</button>
<button type="submit" name="decision" value="deny">Deny</button>
</form></body></html>"""
    answer = HTMLResponse(body, headers=_HEADERS)
    secure = own_issuer.startswith("https://")
    answer.set_cookie(
        cookie_name(own_issuer), csrf, max_age=PENDING_TTL_S, path="/", secure=secure,
        httponly=True, samesite="strict",
    )  # fmt: skip
    return answer


async def posted_token(request: Request, own_issuer: str) -> tuple[str, str] | None:
    """(request id, decision) of a post made from the page itself; None for any other post
    (no cookie, or a token that is not the cookie's: a cross-site form)."""
    form = await request.form()
    csrf, request_id = form.get("csrf"), form.get("request")
    cookie = request.cookies.get(cookie_name(own_issuer))
    if not (isinstance(csrf, str) and isinstance(request_id, str) and csrf and cookie):
        return None
    if not hmac.compare_digest(csrf.encode(), cookie.encode()):
        return None
    return request_id, str(form.get("decision") or "")


def denied(own_issuer: str, params: AuthorizationParams) -> Response:
    """Back to the client's registered redirect URI with `access_denied`."""
    url = construct_redirect_uri(
        str(params.redirect_uri),
        state=params.state,
        iss=own_issuer,
        error="access_denied",
        error_description="the person did not allow this client",
    )
    answer = RedirectResponse(url, status_code=302, headers={"Cache-Control": "no-store"})
    answer.delete_cookie(cookie_name(own_issuer), path="/")
    return answer
