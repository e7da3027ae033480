"""The facade's consent step (MCP authorization, "confused deputy"): fedhpc signs every person in
upstream with ONE static client, while anyone may register an MCP client with fedhpc. Without
asking the person which client they are signing in to, a link to /authorize naming an
attacker's registered client would, after an upstream sign-in the provider remembers, send the
person's fedhpc code to the attacker's redirect URI. So /authorize shows fedhpc's own consent
page (the client's name and redirect URI, the scopes), protected against cross-site posting
and framing, and only an approval sends the person upstream."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx2
from starlette.applications import Starlette

from fedhpc.domain.service import ServiceConfig
from fedhpc.mcp_server.service_http import _serve_facade
from fedhpc.service import ServiceAuth
from fedhpc.service.facade import Facade
from fedhpc.service.upstream import Upstream
from fedhpc.service.verifier import KeyCache

UPSTREAM = "https://auth.globus.org"
RESOURCE = "https://fedhpc.example.org/mcp"
OWN = "https://fedhpc.example.org"
EVIL = "https://attacker.example/cb"


def _config(tmp_path: Path) -> ServiceConfig:
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    secret.chmod(0o600)
    return ServiceConfig.model_validate(
        {
            "issuer": UPSTREAM,
            "resource": RESOURCE,
            "allowed_domains": ["lab.example"],
            "facade": {"client_id": "fedhpc", "client_secret_file": str(secret)},
        }
    )


def _discovery(request: httpx2.Request) -> httpx2.Response:
    assert request.url.path == "/.well-known/openid-configuration", request.url
    meta = {
        "issuer": UPSTREAM,
        "authorization_endpoint": f"{UPSTREAM}/v2/oauth2/authorize",
        "token_endpoint": f"{UPSTREAM}/v2/oauth2/token",
        "jwks_uri": f"{UPSTREAM}/jwk.json",
    }
    return httpx2.Response(200, json=meta)


def _facade(tmp_path: Path) -> tuple[ServiceAuth, Starlette]:
    config = _config(tmp_path)
    auth = ServiceAuth.from_config(config, home=tmp_path / "home")
    assert isinstance(auth.facade, Facade)
    http = httpx2.AsyncClient(transport=httpx2.MockTransport(_discovery))
    auth.facade.upstream = Upstream(config, "s3cret", http, KeyCache(config, http))
    app = Starlette()
    _serve_facade(app, auth)
    return auth, app


@asynccontextmanager
async def _browser(
    tmp_path: Path,
) -> AsyncIterator[tuple[httpx2.AsyncClient, httpx2.ASGITransport]]:
    """A person's browser (its cookies kept) on the facade's app in process, and the app's
    transport, for another browser to come from elsewhere."""
    auth, app = _facade(tmp_path)
    try:
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url=OWN) as web:
            yield web, transport
    finally:
        await auth.aclose()


async def _authorize(web: httpx2.AsyncClient, name: str) -> httpx2.Response:
    registered = await web.post(
        "/register",
        json={
            "redirect_uris": [EVIL],
            "token_endpoint_auth_method": "none",
            "client_name": name,
        },
    )
    query = {
        "response_type": "code",
        "client_id": registered.json()["client_id"],
        "redirect_uri": EVIL,
        "code_challenge": "c" * 43,
        "code_challenge_method": "S256",
        "state": "client-state",
        "resource": RESOURCE,
    }
    return await web.get(f"/authorize?{urlencode(query)}")


def _hidden(page: str) -> dict[str, str]:
    return dict(re.findall(r'<input type="hidden" name="([\w-]+)" value="([^"]*)"', page))


async def _consent_page(web: httpx2.AsyncClient, name: str) -> httpx2.Response:
    """The consent page /authorize sends the person to, for a client registered as `name`."""
    sent = await _authorize(web, name)
    return await web.get(sent.headers["location"])


async def test_authorize_asks_the_person_before_sending_them_upstream(tmp_path: Path) -> None:
    async with _browser(tmp_path) as (web, _):
        sent = await _authorize(web, "<b>Claude</b>")
        assert sent.status_code == 302
        where = sent.headers["location"]
        assert where.startswith(f"{OWN}/consent?"), where  # fedhpc's page, not upstream's
        page = await web.get(where)
    assert page.status_code == 200
    assert "&lt;b&gt;Claude&lt;/b&gt;" in page.text and "<b>Claude" not in page.text
    assert EVIL in page.text and "fedhpc:submit" in page.text
    assert page.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert page.headers["cache-control"] == "no-store"


async def test_only_the_persons_own_approval_sends_them_upstream(tmp_path: Path) -> None:
    async with _browser(tmp_path) as (web, transport):
        page = await _consent_page(web, "agent")
        form: dict[str, Any] = {**_hidden(page.text), "decision": "allow"}
        assert set(form) >= {"request", "csrf"}
        state = form["request"]

        # The attacker's page posting the form cross-site: no consent cookie goes with it.
        async with httpx2.AsyncClient(transport=transport, base_url=OWN) as other:
            forged = await other.post("/consent", data=form)
            assert forged.status_code == 403 and "location" not in forged.headers
            # ... nor may anyone skip the page and come back from upstream at once
            skipped = await other.get(f"/callback?{urlencode({'state': state, 'code': 'x'})}")
            assert skipped.status_code == 400 and "location" not in skipped.headers

        approved = await web.post("/consent", data=form)
        assert approved.status_code == 302
        upstream = approved.headers["location"]
        assert upstream.startswith(f"{UPSTREAM}/v2/oauth2/authorize?"), upstream
        assert parse_qs(urlsplit(upstream).query)["state"] == [state]
        again = await web.post("/consent", data=form)  # one approval per request
        assert again.status_code in (400, 403) and "location" not in again.headers


async def test_a_refusal_goes_back_to_the_client_as_access_denied(tmp_path: Path) -> None:
    async with _browser(tmp_path) as (web, _):
        page = await _consent_page(web, "agent")
        denied = await web.post("/consent", data={**_hidden(page.text), "decision": "deny"})
    assert denied.status_code == 302
    back = denied.headers["location"]
    assert back.startswith(EVIL) and "code=" not in back
    query = parse_qs(urlsplit(back).query)
    assert query["error"] == ["access_denied"] and query["state"] == ["client-state"]


async def test_a_refresh_goes_to_the_upstream_the_facade_holds_now(tmp_path: Path) -> None:
    """The facade's `upstream` is its one client at the provider: once replaced (as this
    module replaces it with an offline one), refreshing a person's tokens goes through the new
    one, never the one the facade was built with."""
    auth, _ = _facade(tmp_path)
    assert isinstance(auth.facade, Facade)
    asked: list[str] = []

    def provider(request: httpx2.Request) -> httpx2.Response:
        asked.append(request.url.path)
        if request.url.path == "/.well-known/openid-configuration":
            return _discovery(request)
        return httpx2.Response(400, json={"error": "invalid_grant"})

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(provider))
    auth.facade.upstream = Upstream(auth.config, "s3cret", http, KeyCache(auth.config, http))
    try:
        due = {"access_token": "a", "refresh_token": "r", "expires_at": 0}
        await auth.facade.store.put_upstream("alice", {"sets": [due]})
        assert await auth.facade.refresh_upstream("alice") is False  # this provider refused
        assert asked == ["/.well-known/openid-configuration", "/v2/oauth2/token"]
    finally:
        await auth.aclose()
