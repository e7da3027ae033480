"""The authorization server facade's parts that need no provider: its config, the keys it makes,
the sealed upstream tokens, the store's single-use steps across a reopen, its own access tokens,
and an expired code refused by the SDK's token endpoint over the facade."""

from __future__ import annotations

import base64
import hashlib
import time
from pathlib import Path
from typing import Any

import httpx2
import jwt
import pytest
from cryptography.fernet import Fernet
from mcp.server.auth.routes import create_auth_routes
from pydantic import ValidationError
from starlette.applications import Starlette

from fedhpc.domain.service import ServiceConfig
from fedhpc.errors import UsageError
from fedhpc.mcp_server.service_http import _serve_facade
from fedhpc.service import ServiceAuth
from fedhpc.service.facade import Facade
from fedhpc.service.facade_store import FacadeStore, Sealer, load_fernet_key
from fedhpc.service.facade_tokens import FacadeVerifier, Signer, load_signing_key

UPSTREAM = "https://auth.globus.org"
RESOURCE = "https://fedhpc.example.org/mcp"
OWN = "https://fedhpc.example.org"
CAROL = {"iss": UPSTREAM, "sub": "u-carol", "email": "carol@lab.example", "email_verified": True}


def _config(tmp_path: Path, **facade: Any) -> ServiceConfig:
    secret = tmp_path / "secret"
    if not secret.exists():
        secret.write_text("s3cret\n")
        secret.chmod(0o600)
    return ServiceConfig.model_validate(
        {
            "issuer": UPSTREAM,
            "resource": RESOURCE,
            "allowed_domains": ["lab.example"],
            "facade": {"client_id": "fedhpc", "client_secret_file": str(secret), **facade},
        }
    )


def _store(tmp_path: Path) -> FacadeStore:
    key = load_fernet_key(tmp_path / "keys" / "tokens.key")
    return FacadeStore(tmp_path / "facade.db", Sealer(key))


def test_the_facade_section_is_read_and_its_bounds_hold(tmp_path: Path) -> None:
    config = _config(tmp_path, authorize_params={"access_type": "offline"})
    assert config.facade is not None and config.facade.access_token_ttl_s == 600
    assert config.own_issuer == "https://fedhpc.example.org"
    with pytest.raises(ValidationError):
        _config(tmp_path, access_token_ttl_s=86400)  # fedhpc's tokens stay short-lived
    with pytest.raises(ValidationError):
        _config(tmp_path, client_secret="inline")  # secrets live in a file, not the config


def test_a_secret_file_others_may_read_is_refused(tmp_path: Path) -> None:
    config = _config(tmp_path)
    (tmp_path / "secret").chmod(0o644)
    with pytest.raises(UsageError, match="may be read by others"):
        ServiceAuth.from_config(config, home=tmp_path / "home")


async def test_with_a_facade_fedhpc_is_the_issuer_and_serves_registration(
    tmp_path: Path,
) -> None:
    auth = ServiceAuth.from_config(_config(tmp_path), home=tmp_path / "home")
    try:
        assert auth.facade is not None
        assert str(auth.settings.issuer_url) == "https://fedhpc.example.org"
        registration = auth.settings.client_registration_options
        assert registration is not None and registration.enabled
        for made in ("signing-key.pem", "tokens.key"):  # made once, for the service user only
            assert (tmp_path / "home" / "facade" / made).stat().st_mode & 0o777 == 0o600
    finally:
        await auth.aclose()


def test_keys_are_made_once_and_read_back(tmp_path: Path) -> None:
    first = load_signing_key(tmp_path / "k" / "signing.pem")
    again = load_signing_key(tmp_path / "k" / "signing.pem")
    assert first.private_numbers() == again.private_numbers()
    assert load_fernet_key(tmp_path / "k" / "f.key") == load_fernet_key(tmp_path / "k" / "f.key")
    assert (tmp_path / "k").stat().st_mode & 0o777 == 0o700


def test_sealed_tokens_open_only_with_their_key() -> None:
    sealer = Sealer(Fernet.generate_key())
    sealed = sealer.seal({"access_token": "upstream-canary"})
    assert b"upstream-canary" not in sealed
    assert sealer.open(sealed) == {"access_token": "upstream-canary"}
    assert Sealer(Fernet.generate_key()).open(sealed) is None


async def test_single_use_steps_hold_across_a_reopen(tmp_path: Path) -> None:
    store = _store(tmp_path)
    await store.put_client("c1", '{"client_id": "c1"}')
    await store.put_pending("state-1", {"nonce": "n"}, ttl_s=60)
    await store.put_code("code-1", {"client_id": "c1"}, expires_at=time.time() + 60)
    await store.new_family("fam", "issuer|sub", "c1")
    await store.put_refresh("refresh-1", "fam", {"client_id": "c1"}, expires_at=time.time() + 60)
    await store.put_upstream("issuer|sub", {"sets": [{"access_token": "upstream-canary"}]})
    await store.aclose()

    store = _store(tmp_path)  # the service restarted
    try:
        assert await store.client("c1") == '{"client_id": "c1"}'
        assert await store.take_pending("state-1") == {"nonce": "n"}
        assert await store.take_pending("state-1") is None
        assert await store.use_code("code-1", "fam") and not await store.use_code("code-1", "x")
        assert await store.code("code-1") == ({"client_id": "c1"}, "fam")
        assert await store.use_refresh("refresh-1") and not await store.use_refresh("refresh-1")
        assert await store.family_live("fam")
        await store.revoke_family("fam")
        assert not await store.family_live("fam")
        upstream = await store.upstream("issuer|sub")
        assert upstream == {"sets": [{"access_token": "upstream-canary"}]}
    finally:
        await store.aclose()
    raw = (tmp_path / "facade.db").read_bytes()
    for secret in (b"upstream-canary", b"code-1", b"refresh-1", b"state-1"):
        assert secret not in raw  # codes and refresh tokens hashed, upstream tokens sealed


async def test_fedhpc_tokens_name_the_upstream_person_and_die_with_their_family(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path)
    store = _store(tmp_path)
    signer = Signer(config, load_signing_key(tmp_path / "signing.pem"))
    verifier = FacadeVerifier(config, signer, store)
    await store.new_family("fam", f"{UPSTREAM}|u-carol", "agent")

    def mint(resource: str = RESOURCE, identity: dict[str, Any] = CAROL) -> str:
        return signer.mint(
            identity=identity,
            client_id="agent",
            scopes=["fedhpc:read"],
            family="fam",
            resource=resource,
            now=time.time(),
            ttl_s=60,
        )

    try:
        got = await verifier.verify_token(mint())
        assert got is not None and got.subject == "u-carol" and got.scopes == ["fedhpc:read"]
        assert got.claims == {"iss": UPSTREAM, "email": "carol@lab.example"}  # the same person
        assert await verifier.verify_token(mint("https://other.example/mcp")) is None
        stranger = {**CAROL, "email": "mallory@elsewhere.example"}
        assert await verifier.verify_token(mint(identity=stranger)) is None
        other_key = Signer(config, load_signing_key(tmp_path / "other.pem"))
        forged = jwt.decode(mint(), options={"verify_signature": False})
        assert await verifier.verify_token(jwt.encode(forged, other_key.key, "ES256")) is None
        await store.revoke_family("fam")
        assert await verifier.verify_token(mint()) is None
    finally:
        await store.aclose()


async def test_an_expired_code_is_refused_by_the_token_endpoint(tmp_path: Path) -> None:
    auth = ServiceAuth.from_config(_config(tmp_path), home=tmp_path / "home")
    facade = auth.facade
    assert isinstance(facade, Facade) and auth.settings.client_registration_options is not None
    routes = create_auth_routes(
        facade,
        auth.settings.issuer_url,
        client_registration_options=auth.settings.client_registration_options,
    )
    verifier = "v" * 50
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
    redirect = "http://127.0.0.1:9/cb"
    transport = httpx2.ASGITransport(app=Starlette(routes=routes))
    try:
        async with httpx2.AsyncClient(transport=transport, base_url=auth.config.own_issuer) as web:
            registered = await web.post(
                "/register",
                json={"redirect_uris": [redirect], "token_endpoint_auth_method": "none"},
            )
            client_id = registered.json()["client_id"]
            code = {
                "client_id": client_id,
                "scopes": ["fedhpc:read"],
                "code_challenge": challenge.rstrip(b"=").decode(),
                "redirect_uri": redirect,
                "redirect_uri_provided_explicitly": True,
                "resource": RESOURCE,
                "identity": CAROL,
                "expires_at": time.time() - 1,  # its life is over
            }
            await facade.store.put_code("old-code", code, code["expires_at"])
            answer = await web.post(
                "/token",
                data={
                    "grant_type": "authorization_code",
                    "client_id": client_id,
                    "code": "old-code",
                    "code_verifier": verifier,
                    "redirect_uri": redirect,
                },
            )
        assert answer.status_code == 400
        assert answer.json()["error"] == "invalid_grant" and "expired" in answer.text
        assert "refresh_token" not in answer.text
    finally:
        await auth.aclose()


def _app(tmp_path: Path) -> tuple[ServiceAuth, Facade, httpx2.AsyncClient]:
    """The facade's routes as `serve --http` mounts them, and a client of them in-process."""
    auth = ServiceAuth.from_config(_config(tmp_path), home=tmp_path / "home")
    assert isinstance(auth.facade, Facade)
    app = Starlette()
    _serve_facade(app, auth)
    for path in ("/.well-known/oauth-authorization-server", "/revoke"):  # fedhpc's, not twice
        assert [getattr(r, "path", None) for r in app.router.routes].count(path) == 1
    transport = httpx2.ASGITransport(app=app)
    return auth, auth.facade, httpx2.AsyncClient(transport=transport, base_url=OWN)


async def _public_client(web: httpx2.AsyncClient) -> str:
    body = {"redirect_uris": ["http://127.0.0.1:9/cb"], "token_endpoint_auth_method": "none"}
    registered = await web.post("/register", json=body)
    assert registered.status_code == 201, registered.text
    client_id: str = registered.json()["client_id"]
    return client_id


async def test_the_metadata_advertises_public_clients_and_the_iss_it_sends(tmp_path: Path) -> None:
    auth, _, web = _app(tmp_path)
    try:
        async with web:
            metadata = (await web.get("/.well-known/oauth-authorization-server")).json()
    finally:
        await auth.aclose()
    assert metadata["issuer"] == OWN and metadata["revocation_endpoint"] == f"{OWN}/revoke"
    for methods in ("token_endpoint_auth_methods", "revocation_endpoint_auth_methods"):
        assert metadata[f"{methods}_supported"] == [
            "client_secret_post",
            "client_secret_basic",
            "none",
        ]
    # RFC 9207: every authorization response carries `iss` (Facade.callback); said here, a
    # client rejects a response without it (mix-up).
    assert metadata["authorization_response_iss_parameter_supported"] is True
    assert metadata["code_challenge_methods_supported"] == ["S256"]


async def test_a_public_client_revokes_its_own_sign_in_with_no_secret(tmp_path: Path) -> None:
    auth, facade, web = _app(tmp_path)
    try:
        async with web:
            mine, theirs = await _public_client(web), await _public_client(web)
            await facade.store.new_family("fam", f"{UPSTREAM}|u-carol", mine)
            access = facade.signer.mint(
                identity=CAROL,
                client_id=mine,
                scopes=["fedhpc:read"],
                family="fam",
                resource=RESOURCE,
                now=time.time(),
                ttl_s=60,
            )
            assert await facade.verifier.verify_token(access) is not None
            # Another client's request leaves the sign-in alone, answered as RFC 7009 says.
            other = await web.post("/revoke", data={"client_id": theirs, "token": access})
            assert other.status_code == 200
            assert await facade.verifier.verify_token(access) is not None
            # client_id and token only (RFC 7009 2.1): the SDK's form wanted a client_secret.
            revoked = await web.post("/revoke", data={"client_id": mine, "token": access})
            unknown = await web.post("/revoke", data={"client_id": "nobody", "token": access})
            empty = await web.post("/revoke", data={"client_id": mine})
            assert await facade.verifier.verify_token(access) is None
    finally:
        await auth.aclose()
    assert revoked.status_code == 200 and revoked.headers["cache-control"] == "no-store"
    assert unknown.status_code == 401 and unknown.json()["error"] == "invalid_client"
    assert empty.status_code == 400 and empty.json()["error"] == "invalid_request"
