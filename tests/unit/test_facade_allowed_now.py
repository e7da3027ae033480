"""The facade applies the operator's current lists to every token use, not only at sign-in: a
person taken off `allowed_domains`/`allowed_subjects` cannot refresh their sign-in, and one
taken off `admin_subjects` loses `fedhpc:admin` on their live access tokens and on every
refresh (rotation would otherwise carry the scope on for as long as they keep refreshing)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from mcp.server.auth.provider import TokenError
from mcp.shared.auth import OAuthClientInformationFull

from fedhpc.domain.service import ServiceConfig
from fedhpc.errors import UsageError
from fedhpc.service import ServiceAuth
from fedhpc.service.access import ADMIN, READ
from fedhpc.service.facade import Facade

UPSTREAM = "https://auth.globus.org"
RESOURCE = "https://fedhpc.example.org/mcp"
CAROL = {"iss": UPSTREAM, "sub": "u-carol", "email": "carol@lab.example", "email_verified": True}


def _facade(tmp_path: Path, **service: Any) -> tuple[ServiceAuth, Facade]:
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    secret.chmod(0o600)
    facade = {"client_id": "fedhpc", "client_secret_file": str(secret)}
    config = ServiceConfig.model_validate(
        {
            "issuer": UPSTREAM,
            "resource": RESOURCE,
            "allowed_domains": ["lab.example"],
            **service,
            "facade": {**facade, **service.pop("facade", {})},
        }
    )
    auth = ServiceAuth.from_config(config, home=tmp_path / "home")
    assert isinstance(auth.facade, Facade)
    return auth, auth.facade


async def _signed_in(facade: Facade, scopes: list[str]) -> tuple[str, str]:
    """(an access token, a refresh token) of Carol's sign-in with `scopes`."""
    await facade.store.new_family("fam", f"{UPSTREAM}|u-carol", "agent")
    expires_at = int(time.time()) + 3600
    record = {"client_id": "agent", "scopes": scopes, "identity": CAROL, "expires_at": expires_at}
    await facade.store.put_refresh("r-1", "fam", record, expires_at)
    access = facade.signer.mint(
        identity=CAROL,
        client_id="agent",
        scopes=scopes,
        family="fam",
        resource=RESOURCE,
        now=time.time(),
        ttl_s=600,
    )
    return access, "r-1"


async def test_admin_ends_with_the_admin_list_on_live_and_refreshed_tokens(
    tmp_path: Path,
) -> None:
    auth, facade = _facade(tmp_path, facade={"admin_subjects": ["u-carol"]})
    try:
        access, refresh = await _signed_in(facade, [ADMIN, READ])
        got = await facade.load_access_token(access)
        assert got is not None and ADMIN in got.scopes  # an admin while listed
    finally:
        await auth.aclose()

    auth, facade = _facade(tmp_path)  # the operator took Carol off admin_subjects; restarted
    try:
        got = await facade.load_access_token(access)
        assert got is not None and got.scopes == [READ]
        client = OAuthClientInformationFull(client_id="agent", redirect_uris=None)
        kept = await facade.load_refresh_token(client, refresh)
        assert kept is not None and kept.scopes == [READ]
    finally:
        await auth.aclose()


async def test_a_person_taken_off_the_allow_list_cannot_refresh(tmp_path: Path) -> None:
    auth, facade = _facade(tmp_path)
    try:
        access, refresh = await _signed_in(facade, [READ])
    finally:
        await auth.aclose()

    auth, facade = _facade(tmp_path, allowed_domains=["other.example"])
    try:
        client = OAuthClientInformationFull(client_id="agent", redirect_uris=None)
        assert await facade.load_access_token(access) is None
        assert await facade.load_refresh_token(client, refresh) is None
        assert not await facade.store.family_live("fam")  # their sign-in is over
    finally:
        await auth.aclose()


async def test_a_key_file_others_may_read_is_refused(tmp_path: Path) -> None:
    """The signing key mints anyone's fedhpc tokens, the sealing key opens every upstream token:
    an operator-given (or loosened) key file others may read is refused, as the secret is."""
    auth, _ = _facade(tmp_path)  # makes both, 0600
    await auth.aclose()
    keys = tmp_path / "home" / "facade"
    for name in ("signing-key.pem", "tokens.key"):
        (keys / name).chmod(0o644)
        with pytest.raises(UsageError, match="may be read by others"):
            _facade(tmp_path)
        (keys / name).chmod(0o600)


async def test_a_code_exchanged_twice_at_once_revokes_what_the_first_got(tmp_path: Path) -> None:
    """Two exchanges of one code racing (both loaded it unused): the loser is refused and,
    as for a later replay (RFC 9700 4.2.3), the winner's sign-in is revoked too."""
    auth, facade = _facade(tmp_path)
    try:
        client = OAuthClientInformationFull(client_id="agent", redirect_uris=None)
        expires_at = time.time() + 60
        record = {
            "client_id": "agent",
            "scopes": [READ],
            "code_challenge": "c" * 43,
            "redirect_uri": "http://127.0.0.1:9/cb",
            "redirect_uri_provided_explicitly": True,
            "identity": CAROL,
            "expires_at": expires_at,
        }
        await facade.store.put_code("code-1", record, expires_at)
        first = await facade.load_authorization_code(client, "code-1")
        second = await facade.load_authorization_code(client, "code-1")
        assert first is not None and second is not None
        tokens = await facade.exchange_authorization_code(client, first)
        assert await facade.load_access_token(tokens.access_token) is not None
        with pytest.raises(TokenError):
            await facade.exchange_authorization_code(client, second)
        assert await facade.load_access_token(tokens.access_token) is None
    finally:
        await auth.aclose()
