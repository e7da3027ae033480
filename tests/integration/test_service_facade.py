"""The authorization server facade (issue 34 item 2): `serve --http` with `[service.facade]`
signs people in at a real OpenID provider through one static confidential client (no dynamic
registration for fedhpc there, as at Globus Auth), and issues its own tokens to MCP clients that
register with fedhpc: the MCP SDK's own OAuth client end to end, refresh rotation and reuse
detection, PKCE, revocation, a restart, and upstream tokens that never leave the service."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx2
import jwt
import pytest
from cryptography.fernet import Fernet
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.integration.daemon_util import start, stop
from tests.integration.mcp_support import serve_argv, serve_env
from tests.integration.oidc_support import (
    Provider,
    bearer_initialize,
    consent_form,
    facade_config,
    first_calls,
    free_port,
    oidc_provider,
    sdk_oauth,
    sign_in,
)

REDIRECT = "http://127.0.0.1:9/callback"  # the MCP client's; never reached (sign_in stops there)
SCOPE = "fedhpc:read fedhpc:submit fedhpc:data"


@dataclass
class Facade:
    provider: Provider
    own: str  # fedhpc's issuer: the resource's origin
    home: Path
    base: Path
    env: dict[str, str]
    config: Path
    serve: subprocess.Popen[bytes] | None = None
    logs: list[Path] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)  # every body the clients received
    upstream_seen: set[str] = field(default_factory=set)  # upstream token values, ever
    issued: set[str] = field(default_factory=set)  # fedhpc's own tokens: never in a log

    @property
    def resource(self) -> str:
        return f"{self.own}/mcp"

    def start_serve(self) -> None:
        log = self.base / f"serve-{len(self.logs)}.log"
        self.logs.append(log)
        port = int(self.own.rsplit(":", 1)[1])
        with log.open("wb") as err:
            argv = serve_argv("--http", "--port", str(port), "--no-autostart")
            self.serve = subprocess.Popen(
                [*argv, "--daemon-wait", "60"],
                env=serve_env(self.home, FEDHPC_CONFIG=str(self.config), **self.env),
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.serve.poll() is not None:
                pytest.fail(f"serve exited {self.serve.returncode}: {log.read_text()[-1500:]}")
            try:
                httpx2.get(f"{self.own}/.well-known/oauth-authorization-server")
            except httpx2.TransportError:
                time.sleep(0.2)
                continue
            return
        pytest.fail("serve did not start listening")

    def upstream_tokens(self, login: str = "%") -> list[dict[str, Any]]:
        """The upstream token sets of `login` (default everyone's), unsealed with the service's
        own key (the test reads the service's files as its operator could)."""
        fernet = Fernet((self.home / "facade" / "tokens.key").read_bytes().strip())
        with sqlite3.connect(self.home / "facade" / "facade.db") as db:
            rows = db.execute(
                "SELECT sealed FROM upstream WHERE person LIKE ?",
                (f"{self.provider.issuer}|{login}",),
            ).fetchall()
        sets = [s for (sealed,) in rows for s in json.loads(fernet.decrypt(sealed))["sets"]]
        for s in sets:
            self.upstream_seen.update(v for k in ("access_token", "refresh_token") if (v := s[k]))
        return sets

    async def token(self, form: dict[str, str]) -> httpx2.Response:
        async with httpx2.AsyncClient(timeout=30) as http:
            answer = await http.post(f"{self.own}/token", data=form)
        self.answers.append(answer.text)
        if answer.status_code == 200:
            self.issued |= {answer.json()["access_token"], answer.json()["refresh_token"]}
        return answer


@pytest.fixture(scope="module")
def facade(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Facade]:
    base = tmp_path_factory.mktemp("facade")
    env = {"FEDHPC_DEVFED": "process", "FEDHPC_DEVFED_DIR": str(base / "devfed")}
    home = base / "h"
    own = f"http://127.0.0.1:{free_port()}"
    with oidc_provider(base / "provider.log", facade_redirect=f"{own}/callback") as provider:
        config = facade_config(
            base,
            provider,
            own,
            scopes=("openid", "email", "offline_access"),
            service="leeway_s = 0\n",
            facade='authorize_params = {prompt = "consent"}\n'  # oidc-provider's rule for
            # offline_access; every refresh here refreshes upstream too:
            "upstream_refresh_margin_s = 2592000\n",
        )
        daemon = start(home, **env)
        setup = Facade(provider, own, home, base, env, config)
        try:
            setup.start_serve()
            yield setup
        finally:
            if setup.serve is not None:
                stop(setup.serve)
            stop(daemon)


def _pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(40)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


async def _register(facade: Facade) -> str:
    metadata = {
        "redirect_uris": [REDIRECT],
        "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "scope": SCOPE,
    }
    async with httpx2.AsyncClient(timeout=30) as http:
        answer = await http.post(f"{facade.own}/register", json=metadata)
    assert answer.status_code == 201, answer.text
    client_id: str = answer.json()["client_id"]
    return client_id


def _authorize_url(facade: Facade, client_id: str, challenge: str) -> str:
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": REDIRECT,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": "client-state",
        "scope": SCOPE,
        "resource": facade.resource,
    }
    return f"{facade.own}/authorize?{urlencode(query)}"


async def _code(facade: Facade, client_id: str, login: str = "erin@lab.example") -> tuple[str, str]:
    """A code of fedhpc's for `login` (the upstream forms walked), and its PKCE verifier."""
    verifier, challenge = _pkce()
    answer = await sign_in(_authorize_url(facade, client_id, challenge), login, REDIRECT)
    assert answer.get("state") == "client-state" and "code" in answer, answer
    assert answer.get("iss") == facade.own  # RFC 9207: who answered
    return answer["code"], verifier


def _grant(facade: Facade, client_id: str, code: str, verifier: str) -> dict[str, str]:
    return {
        "grant_type": "authorization_code",
        "client_id": client_id,
        "code": code,
        "code_verifier": verifier,
        "redirect_uri": REDIRECT,
        "resource": facade.resource,
    }


async def _signed_in(facade: Facade) -> tuple[str, dict[str, Any]]:
    client_id = await _register(facade)
    code, verifier = await _code(facade, client_id)
    answer = await facade.token(_grant(facade, client_id, code, verifier))
    assert answer.status_code == 200, answer.text
    tokens: dict[str, Any] = answer.json()
    return client_id, tokens


async def _status(facade: Facade, access: str) -> int:
    return (await bearer_initialize(facade.resource, access)).status_code


async def test_the_sdk_oauth_client_registers_at_fedhpc_and_signs_in_upstream(
    facade: Facade,
) -> None:
    asked: list[str] = []
    oauth, storage = sdk_oauth(facade.resource, "carol@lab.example", asked)
    inspect, submit = await first_calls(facade.resource, oauth)
    assert asked and all(u.startswith(f"{facade.own}/authorize?") for u in asked), asked
    assert not inspect.is_error, inspect.content
    assert json.loads(submit.content[0].text)["code"] == "validation"  # type: ignore[union-attr]
    assert storage.tokens is not None and storage.tokens.refresh_token
    assert storage.client is not None  # registered at fedhpc (RFC 7591)
    facade.answers.append(storage.tokens.model_dump_json())
    claims = jwt.decode(storage.tokens.access_token, options={"verify_signature": False})
    assert claims["iss"] == facade.own and claims["aud"] == facade.resource
    # The person is the upstream provider's: the same `issuer|sub` as without the facade.
    assert claims["idp"] == facade.provider.issuer and claims["sub"] == "carol@lab.example"
    assert set(claims["scope"].split()) == set(SCOPE.split())
    assert claims["client_id"] == storage.client.client_id


async def test_fedhpc_sends_the_person_upstream_with_its_own_client_state_and_pkce(
    facade: Facade,
) -> None:
    client_id = await _register(facade)
    _, challenge = _pkce()
    async with httpx2.AsyncClient(timeout=30) as http:
        asked = await http.get(_authorize_url(facade, client_id, challenge))
        assert asked.headers["location"].startswith(f"{facade.own}/consent?")  # asked first
        page = await http.get(asked.headers["location"])
        form = consent_form(page.text)
        assert form is not None
        answer = await http.post(f"{facade.own}/consent", data=form)
    assert answer.status_code == 302
    location = answer.headers["location"]
    assert location.startswith(facade.provider.issuer)
    query = parse_qs(urlsplit(location).query)
    assert query["client_id"] == ["fedhpc-facade"]
    assert query["redirect_uri"] == [f"{facade.own}/callback"]
    assert query["code_challenge"] != [challenge] and query["state"] != ["client-state"]
    assert query["code_challenge_method"] == ["S256"] and "nonce" in query


async def test_a_refresh_rotates_and_a_reused_refresh_token_revokes_the_sign_in(
    facade: Facade,
) -> None:
    client_id, first = await _signed_in(facade)
    before = {s["access_token"] for s in facade.upstream_tokens("erin@lab.example")}
    form = {"grant_type": "refresh_token", "client_id": client_id}
    second = await facade.token({**form, "refresh_token": first["refresh_token"]})
    assert second.status_code == 200, second.text
    rotated = second.json()
    assert rotated["refresh_token"] != first["refresh_token"]
    assert await _status(facade, rotated["access_token"]) == 200
    # The service refreshed the person's upstream token on the way (the margin says so).
    assert before and not before & {
        s["access_token"] for s in facade.upstream_tokens("erin@lab.example")
    }

    replay = await facade.token({**form, "refresh_token": first["refresh_token"]})
    assert replay.status_code == 400 and replay.json()["error"] == "invalid_grant"
    # A used refresh token came back: the whole sign-in is revoked, access tokens included.
    assert await _status(facade, rotated["access_token"]) == 401
    third = await facade.token({**form, "refresh_token": rotated["refresh_token"]})
    assert third.status_code == 400 and third.json()["error"] == "invalid_grant"


async def test_a_wrong_pkce_verifier_or_a_replayed_code_is_refused(facade: Facade) -> None:
    client_id = await _register(facade)
    code, verifier = await _code(facade, client_id)
    wrong = await facade.token(_grant(facade, client_id, code, _pkce()[0]))
    assert wrong.status_code == 400 and wrong.json()["error"] == "invalid_grant", wrong.text
    right = await facade.token(_grant(facade, client_id, code, verifier))
    assert right.status_code == 200, right.text
    access = right.json()["access_token"]
    assert await _status(facade, access) == 200
    again = await facade.token(_grant(facade, client_id, code, verifier))
    assert again.status_code == 400 and again.json()["error"] == "invalid_grant"
    assert await _status(facade, access) == 401  # a replayed code revokes what it gave


async def test_a_person_the_service_does_not_allow_gets_no_code(facade: Facade) -> None:
    client_id = await _register(facade)
    _, challenge = _pkce()
    url = _authorize_url(facade, client_id, challenge)
    answer = await sign_in(url, "mallory@elsewhere.example", REDIRECT)
    assert answer.get("error") == "access_denied" and "code" not in answer
    assert answer.get("state") == "client-state"


async def test_a_revoked_sign_in_ends_its_access_and_refresh_tokens(facade: Facade) -> None:
    client_id, tokens = await _signed_in(facade)
    assert await _status(facade, tokens["access_token"]) == 200
    async with httpx2.AsyncClient(timeout=30) as http:
        revoked = await http.post(
            f"{facade.own}/revoke",
            # a public client: client_id and token only (RFC 7009 2.1), no client_secret field
            data={"client_id": client_id, "token": tokens["refresh_token"]},
        )
    assert revoked.status_code == 200
    assert await _status(facade, tokens["access_token"]) == 401
    refresh = {"grant_type": "refresh_token", "client_id": client_id}
    again = await facade.token({**refresh, "refresh_token": tokens["refresh_token"]})
    assert again.status_code == 400


async def test_clients_and_sign_ins_survive_a_restart(facade: Facade) -> None:
    client_id, tokens = await _signed_in(facade)
    assert facade.serve is not None
    stop(facade.serve)
    facade.start_serve()
    assert await _status(facade, tokens["access_token"]) == 200  # the same signing key
    refresh = {"grant_type": "refresh_token", "client_id": client_id}
    answer = await facade.token({**refresh, "refresh_token": tokens["refresh_token"]})
    assert answer.status_code == 200, answer.text
    assert await _status(facade, answer.json()["access_token"]) == 200


async def test_a_person_signed_in_through_the_facade_owns_their_work_as_upstream_names_them(
    facade: Facade,
) -> None:
    _, tokens = await _signed_in(facade)  # erin, at the upstream provider
    bearer = {"Authorization": f"Bearer {tokens['access_token']}"}
    http = httpx2.AsyncClient(headers=bearer, timeout=60)
    async with http, Client(streamable_http_client(facade.resource, http_client=http)) as c:
        args = {"command": ["true"], "envelope": {"cpus": {"min": 1, "max": 1}}, "name": "mine"}
        answer = await c.call_tool("submit_task", args)
    assert not answer.is_error, answer.content
    facade.answers.append(answer.content[0].text)  # type: ignore[union-attr]
    task_id = json.loads(answer.content[0].text)["task_id"]  # type: ignore[union-attr]
    with sqlite3.connect(facade.home / "fedhpc.db") as db:
        [(owner,)] = db.execute("SELECT owner FROM tasks WHERE id = ?", (task_id,)).fetchall()
    # The same `issuer|sub` a token straight from the provider would give: the same person.
    assert owner == f"{facade.provider.issuer}|erin@lab.example"


async def test_upstream_tokens_never_reach_a_client_a_log_or_a_file_in_clear(
    facade: Facade,
) -> None:
    await _signed_in(facade)  # at least one sign-in, whatever ran before
    facade.upstream_tokens()
    secrets_seen = sorted(facade.upstream_seen)
    assert secrets_seen  # the service holds upstream tokens (else the check proves nothing)
    texts = {str(p): p.read_bytes() for p in facade.logs + sorted(facade.base.glob("daemon-*.log"))}
    assert all(texts.values())  # the logs are written
    texts |= {str(p): p.read_bytes() for p in facade.home.rglob("*") if p.is_file()}
    texts |= {f"answer {i}": a.encode() for i, a in enumerate(facade.answers)}
    for secret in secrets_seen:
        for where, body in texts.items():
            assert secret.encode() not in body, f"an upstream token is in {where}"
    assert facade.issued
    logs = [p.read_bytes() for p in facade.logs + sorted(facade.base.glob("daemon-*.log"))]
    for secret in facade.issued:  # fedhpc's own tokens reach their client only
        assert not any(secret.encode() in log for log in logs), "a fedhpc token was logged"
