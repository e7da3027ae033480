"""Service mode (issue 34): `fedhpc serve --http` with a `[service]` section is an OAuth 2.1
resource server for a real OpenID provider (oidc_support.py), tried through the MCP SDK's own
HTTP client and OAuth client against a real serve process and daemon on private process sites."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
import jwt
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from tests.integration.daemon_util import start, stop
from tests.integration.mcp_support import serve_argv, serve_env
from tests.integration.oidc_support import (
    Provider,
    bearer_initialize,
    first_calls,
    free_port,
    oidc_provider,
    sdk_oauth,
    service_config,
)

CANARY = "canary-bearer-" + "c4n4ry" * 8


@dataclass
class Service:
    provider: Provider
    resource: str
    logs: list[Path]
    home: Path
    env: dict[str, str]
    tokens: list[str] = field(default_factory=list)  # every token minted: none may be logged

    @property
    def metadata_url(self) -> str:
        return self.resource.replace("/mcp", "/.well-known/oauth-protected-resource/mcp")

    def mint(self, person: str, scope: str, resource: str | None = None) -> str:
        token = self.provider.mint(person, scope, resource or self.resource)
        self.tokens.append(token)
        return token


def _wait_listening(proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"serve exited {proc.returncode}: {log.read_text()[-1500:]}")
        try:
            httpx2.get(f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp")
        except httpx2.TransportError:
            time.sleep(0.2)
            continue
        return
    pytest.fail("serve did not start listening")


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    base = tmp_path_factory.mktemp("service")
    env = {"FEDHPC_DEVFED": "process", "FEDHPC_DEVFED_DIR": str(base / "devfed")}
    home = base / "h"
    with oidc_provider(base / "provider.log") as provider:
        port = free_port()
        resource = f"http://127.0.0.1:{port}/mcp"
        config = service_config(base, provider, resource, extra="leeway_s = 0\n")
        daemon = start(home, **env)
        serve_log = base / "serve.log"
        with serve_log.open("wb") as err:
            argv = serve_argv("--http", "--port", str(port), "--no-autostart")
            serve = subprocess.Popen(
                [*argv, "--daemon-wait", "60"],
                env=serve_env(home, FEDHPC_CONFIG=str(config), **env),
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        try:
            _wait_listening(serve, port, serve_log)
            logs = [serve_log, *base.glob("daemon-*.log")]
            yield Service(provider=provider, resource=resource, logs=logs, home=home, env=env)
        finally:
            stop(serve)
            stop(daemon)


@asynccontextmanager
async def _client(url: str, token: str) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    async with http, Client(streamable_http_client(url, http_client=http), mode="legacy") as c:
        yield c


def _body(result: Any) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(result.content[0].text)
    return body


async def test_without_a_token_the_401_points_to_the_protected_resource_metadata(
    service: Service,
) -> None:
    denied = await bearer_initialize(service.resource, None)
    assert denied.status_code == 401
    challenge = denied.headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    assert f'resource_metadata="{service.metadata_url}"' in challenge
    async with httpx2.AsyncClient(timeout=60) as http:
        meta = (await http.get(service.metadata_url)).json()
    assert meta["resource"] == service.resource
    assert meta["authorization_servers"] == [service.provider.issuer]  # exactly: RFC 8414 3.3
    # What a client asks for at sign-in: the everyday capabilities (admin is granted apart).
    assert meta["scopes_supported"] == ["fedhpc:read", "fedhpc:submit", "fedhpc:data"]


async def test_a_read_token_lists_and_inspects_but_may_not_submit_or_move_data(
    service: Service,
) -> None:
    token = service.mint("alice", "fedhpc:read")
    refusals = []
    async with _client(service.resource, token) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        inspect = await client.call_tool("inspect_federation", {})
        for tool in ("submit_task", "move_data"):
            with pytest.raises(MCPError) as refused:
                await client.call_tool(tool, {"command": "true"})
            refusals.append(refused.value)
    assert {"inspect_federation", "submit_task", "move_data"} <= names
    assert not inspect.is_error, inspect.content
    assert inspect.structured_content and inspect.structured_content["sites"]
    for refusal, scope in zip(refusals, ("fedhpc:submit", "fedhpc:data"), strict=True):
        assert refusal.data["code"] == "insufficient_scope"  # the typed body, through the SDK
        assert scope in refusal.data["message"] and scope in refusal.data["hint"]


async def test_a_submit_token_passes_the_scope_guard_to_the_argument_checks(
    service: Service,
) -> None:
    token = service.mint("alice", "fedhpc:read fedhpc:submit")
    async with _client(service.resource, token) as client:
        submit = await client.call_tool("submit_task", {})
        with pytest.raises(MCPError) as move:
            await client.call_tool("move_data", {})
    assert _body(submit)["code"] == "validation"  # past the scope guard: the arguments are next
    assert move.value.data["code"] == "insufficient_scope"


async def test_a_missing_tool_scope_is_a_403_scope_challenge(service: Service) -> None:
    """MCP authorization's scope challenge: 403, error="insufficient_scope", the scopes to ask
    for (held plus needed) and the metadata pointer; nothing reaches the tool."""
    call = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "cancel", "arguments": {"task_id": "t1"}},
    }
    token = service.mint("alice", "fedhpc:read fedhpc:data")
    headers = {
        "accept": "application/json, text/event-stream",
        "authorization": f"Bearer {token}",
    }
    async with httpx2.AsyncClient(timeout=60) as http:
        denied = await http.post(service.resource, json=call, headers=headers)
    assert denied.status_code == 403
    challenge = denied.headers["www-authenticate"]
    assert 'error="insufficient_scope"' in challenge
    assert 'scope="fedhpc:data fedhpc:read fedhpc:submit"' in challenge
    assert f'resource_metadata="{service.metadata_url}"' in challenge
    body = denied.json()
    assert body["id"] == 7 and body["error"]["data"]["code"] == "insufficient_scope"


async def test_wrong_audience_forged_stranger_and_expired_tokens_get_401(
    service: Service,
) -> None:
    good = service.mint("alice", "fedhpc:read")
    other = service.mint("alice", "fedhpc:read", "http://127.0.0.1:9/elsewhere")
    forged = good.rsplit(".", 1)[0] + "." + other.rsplit(".", 1)[1]  # another token's signature
    stranger = service.mint("mallory", "fedhpc:read")  # a domain the config does not allow
    short = service.mint("bob", "fedhpc:read")  # the provider gives bob 2-second tokens
    expiry = jwt.decode(short, options={"verify_signature": False})["exp"]
    assert (await bearer_initialize(service.resource, good)).status_code == 200
    with anyio.fail_after(60):
        while time.time() <= expiry + 1:  # the token's own clock: wait until it has expired
            await anyio.sleep(0.2)
    for token in (other, forged, stranger, short, CANARY):
        denied = await bearer_initialize(service.resource, token)
        assert denied.status_code == 401, denied.text
        assert f'resource_metadata="{service.metadata_url}"' in denied.headers["www-authenticate"]


async def test_a_token_without_the_read_scope_gets_403_insufficient_scope(
    service: Service,
) -> None:
    denied = await bearer_initialize(service.resource, service.mint("alice", "fedhpc:data"))
    assert denied.status_code == 403
    assert 'error="insufficient_scope"' in denied.headers["www-authenticate"]


async def test_the_sdk_oauth_client_discovers_registers_and_signs_in_with_pkce(
    service: Service,
) -> None:
    asked: list[str] = []
    oauth, storage = sdk_oauth(service.resource, "carol@lab.example", asked)
    inspect, submit = await first_calls(service.resource, oauth)
    assert not inspect.is_error, inspect.content
    assert _body(submit)["code"] == "validation"  # signed in with submit: the arguments are next
    [url] = asked  # one sign-in, asking for what the metadata lists
    query = parse_qs(urlsplit(url).query)
    assert query["code_challenge_method"] == ["S256"] and query["resource"] == [service.resource]
    # (the SDK adds offline_access for a refresh token: the provider offers it)
    assert set(query["scope"][0].split()) >= {"fedhpc:read", "fedhpc:submit", "fedhpc:data"}
    assert "fedhpc:admin" not in query["scope"][0]
    assert storage.tokens is not None
    service.tokens.append(storage.tokens.access_token)
    claims = jwt.decode(storage.tokens.access_token, options={"verify_signature": False})
    assert claims["aud"] == service.resource
    assert claims["sub"] == "carol@lab.example"
    assert set(claims["scope"].split()) == {"fedhpc:read", "fedhpc:submit", "fedhpc:data"}


async def test_no_token_ever_reaches_the_serve_or_daemon_logs(service: Service) -> None:
    token = service.mint("alice", "fedhpc:read")
    async with _client(service.resource, token) as client:
        await client.call_tool("inspect_federation", {})
    assert (await bearer_initialize(service.resource, CANARY)).status_code == 401
    secrets = [CANARY, *service.tokens]
    signatures = [t.rsplit(".", 1)[-1] for t in service.tokens]  # a token cut in two, too
    for log in service.logs:
        text = log.read_text(errors="replace")
        assert text, log  # the logs are written (else the check proves nothing)
        for secret in [*secrets, *signatures]:
            assert secret not in text, f"a bearer token reached {log.name}"


async def test_without_a_service_section_http_serves_as_before(service: Service) -> None:
    """No [service] in the config: loopback HTTP needs no token and serves no OAuth metadata."""
    port = free_port()
    log = service.home.parent / "serve-plain.log"
    with log.open("wb") as err:
        argv = serve_argv("--http", "--port", str(port), "--no-autostart", "--daemon-wait", "60")
        plain = subprocess.Popen(
            argv, env=serve_env(service.home, **service.env), stdout=subprocess.DEVNULL, stderr=err
        )
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        with anyio.fail_after(90):
            while True:
                try:
                    answer = await bearer_initialize(url, None)
                    break
                except httpx2.TransportError:
                    assert plain.poll() is None, log.read_text()[-1500:]
                    await anyio.sleep(0.2)
        assert answer.status_code == 200, answer.text
        async with httpx2.AsyncClient(timeout=60) as http:
            meta = await http.get(
                f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp"
            )
        assert meta.status_code == 404
    finally:
        stop(plain)
