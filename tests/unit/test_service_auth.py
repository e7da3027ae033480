"""Service mode's parts that need no provider: the `[service]` config, the scope of every tool,
the caller's identity, and the verifier's key cache (a provider rotating its keys)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx2
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context
from mcp_types import CallToolResult, TextContent
from pydantic import ValidationError
from starlette.requests import Request

from fedhpc.domain.config import UserConfig
from fedhpc.domain.service import ServiceConfig
from fedhpc.errors import ProfileError
from fedhpc.mcp_server.service_http import caller, scope_guard
from fedhpc.mcp_server.tools import TOOLS
from fedhpc.service import (
    TOOL_SCOPES,
    OidcVerifier,
    ServiceAuth,
    caller_from_token,
    load_service,
    needed_scope,
)

ISSUER = "https://idp.example"
RESOURCE = "https://fedhpc.example.org/mcp"


def _config(**extra: Any) -> ServiceConfig:
    return ServiceConfig(
        issuer=ISSUER, resource=RESOURCE, allowed_domains=("lab.example",), **extra
    )


def test_every_tool_has_a_scope_and_an_unknown_one_needs_admin() -> None:
    assert {fn.__name__ for fn in TOOLS} == set(TOOL_SCOPES)
    assert needed_scope("tools/call", {"name": "submit_task"})[0] == "fedhpc:submit"
    assert needed_scope("tools/call", {"name": "move_data"})[0] == "fedhpc:data"
    assert needed_scope("tools/call", {"name": "a_tool_added_later"})[0] == "fedhpc:admin"
    assert needed_scope("tasks/cancel", {})[0] == "fedhpc:submit"
    assert needed_scope("tools/list", None)[0] == "fedhpc:read"


def test_the_caller_carries_identity_and_scopes_but_never_the_token() -> None:
    token = AccessToken(
        token="secret-token-value",
        client_id="agent",
        scopes=["fedhpc:read", "fedhpc:admin"],
        subject="u-1",
        claims={"iss": ISSUER, "email": "ada@lab.example"},
    )
    who = caller_from_token(token)
    assert (who.subject, who.username, who.issuer) == ("u-1", "ada@lab.example", ISSUER)
    assert who.may("fedhpc:submit")  # admin holds every scope
    assert "secret-token-value" not in repr(who)
    refusal = caller_from_token(token.model_copy(update={"scopes": ["fedhpc:read"]})).refuse(
        "fedhpc:submit", "the tool submit_task"
    )
    assert refusal.as_dict()["code"] == "insufficient_scope"
    assert "fedhpc:submit" in refusal.hint


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"issuer": "http://idp.example"}, "https"),
        ({"resource": "https://fedhpc.example.org/mcp?x=1"}, "query"),
        ({"allowed_domains": ()}, "who may call"),
        ({"algorithms": ("HS256",)}, "algorithms"),
    ],
)
def test_a_service_config_that_would_admit_strangers_is_refused(
    change: dict[str, Any], words: str
) -> None:
    data: dict[str, Any] = {
        "issuer": ISSUER,
        "resource": RESOURCE,
        "allowed_domains": ["lab.example"],
        **change,
    }
    with pytest.raises(ValidationError, match=words):
        ServiceConfig.model_validate(data)


def test_http_is_accepted_on_loopback_only() -> None:
    ServiceConfig(issuer="http://127.0.0.1:9400", resource=RESOURCE, allowed_subjects=("s",))


def test_without_a_service_section_serve_keeps_todays_modes(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("default_site_enabled = true\n")
    assert load_service(path) is None
    assert UserConfig().service is None


def test_the_service_section_gives_the_sdk_exact_urls(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        f'[service]\nissuer = "{ISSUER}"\nresource = "{RESOURCE}"\nallowed_domains = ["x.org"]\n'
    )
    auth = load_service(path)
    assert isinstance(auth, ServiceAuth)
    # No trailing "/" appended: the SDK's OAuth client compares issuers character by character.
    assert str(auth.settings.issuer_url) == ISSUER
    assert str(auth.settings.resource_server_url) == RESOURCE
    path.write_text('[service]\nissuer = "https://idp.example"\n')
    with pytest.raises(ProfileError, match="resource"):
        load_service(path)


class _Provider:
    """A provider's discovery document and JWKS, served over httpx2's in-process transport;
    `rotate()` swaps its signing key as a real provider does."""

    def __init__(self) -> None:
        self.kid = 0
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.jwks_fetches = 0

    def rotate(self) -> None:
        self.kid += 1
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.path == "/.well-known/openid-configuration":
            return httpx2.Response(200, json={"issuer": ISSUER, "jwks_uri": f"{ISSUER}/jwks"})
        self.jwks_fetches += 1
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        return httpx2.Response(200, json={"keys": [{**public, "kid": f"k{self.kid}"}]})

    def token(self, **claims: Any) -> str:
        body = {
            "iss": ISSUER,
            "aud": RESOURCE,
            "sub": "u-1",
            "exp": int(time.time()) + 300,
            "scope": "fedhpc:read",
            "email": "ada@lab.example",
            **claims,
        }
        return jwt.encode(body, self.key, algorithm="RS256", headers={"kid": f"k{self.kid}"})


async def test_a_rotated_key_is_fetched_once_and_unknown_kids_do_not_hammer_the_provider() -> None:
    provider = _Provider()
    http = httpx2.AsyncClient(transport=httpx2.MockTransport(provider.handle))
    verifier = OidcVerifier(_config(jwks_min_refresh_s=3600), http)
    first = await verifier.verify_token(provider.token())
    assert first is not None and first.scopes == ["fedhpc:read"] and first.resource == RESOURCE
    provider.rotate()
    # A kid the cache lacks, but the last fetch was just now: no second fetch (rate limit).
    assert await verifier.verify_token(provider.token()) is None
    assert provider.jwks_fetches == 1
    eager = OidcVerifier(_config(jwks_min_refresh_s=0), http)
    assert await eager.verify_token(provider.token()) is not None
    provider.rotate()
    assert await eager.verify_token(provider.token()) is not None  # refreshed on the new kid
    assert provider.jwks_fetches == 3
    await http.aclose()


async def test_unverified_emails_and_strangers_are_refused_but_listed_subjects_pass() -> None:
    provider = _Provider()
    http = httpx2.AsyncClient(transport=httpx2.MockTransport(provider.handle))
    verifier = OidcVerifier(_config(allowed_subjects=("svc-7",)), http)
    assert await verifier.verify_token(provider.token(email_verified=False)) is None
    assert await verifier.verify_token(provider.token(email="eve@elsewhere.example")) is None
    listed = await verifier.verify_token(provider.token(sub="svc-7", email=None))
    assert listed is not None and listed.subject == "svc-7"
    assert await verifier.verify_token(provider.token(aud="https://other.example/mcp")) is None
    await http.aclose()


def test_a_tool_reads_its_signed_in_caller_from_its_context() -> None:
    token = AccessToken(
        token="t", client_id="agent", scopes=["fedhpc:read"], subject="u-9", claims={}
    )
    who = caller(_tool_context(Request({"type": "http", "user": AuthenticatedUser(token)})))
    assert who is not None and who.subject == "u-9" and who.scopes == {"fedhpc:read"}
    # stdio, or the shared token: nobody signed in
    assert caller(_tool_context(Request({"type": "http"}))) is None


def _request_context(
    method: str, params: dict[str, Any], request: Request | None
) -> ServerRequestContext[Any, Any]:
    return ServerRequestContext(
        session=None,  # type: ignore[arg-type]
        lifespan_context=None,
        protocol_version="2025-11-25",
        method=method,
        params=params,
        request=request,
    )


async def test_the_scope_guard_fails_closed_on_a_call_that_acts_without_a_caller() -> None:
    passed: list[str] = []
    answered = {"answered": True}

    async def call_next(ctx: ServerRequestContext[Any, Any]) -> HandlerResult:
        passed.append(ctx.method)
        return answered

    act = _request_context("tools/call", {"name": "cancel", "arguments": {}}, None)
    refused = await scope_guard(act, call_next)
    assert isinstance(refused, CallToolResult) and isinstance(refused.content[0], TextContent)
    assert refused.is_error and json.loads(refused.content[0].text)["code"] == "insufficient_scope"
    assert await scope_guard(_request_context("tools/list", {}, None), call_next) is answered
    token = AccessToken(token="t", client_id="a", scopes=["fedhpc:submit"], subject="u")
    signed_in = Request({"type": "http", "user": AuthenticatedUser(token)})
    act = _request_context("tools/call", {"name": "cancel", "arguments": {}}, signed_in)
    assert await scope_guard(act, call_next) is answered
    assert passed == ["tools/list", "tools/call"]


def _tool_context(request: Request) -> Context[Any, Any]:
    """The context the SDK hands a tool for one HTTP request (no session is needed here)."""
    return Context(request_context=_request_context("tools/call", {}, request))
