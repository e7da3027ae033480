"""The facade's client at the upstream OpenID provider (Globus Auth, CILogon, Keycloak): a
confidential client the operator registered once. It sends the person to sign in (code flow
with PKCE, state and nonce), exchanges the code, checks the ID token (PyJWT, the provider's
JWKS through `KeyCache`), reads the person's claims, and refreshes their tokens. Token values
never reach a log: only error codes and the person's `sub` do."""

from __future__ import annotations

import base64
import hashlib
import secrets
from collections.abc import Mapping
from typing import Any, get_args
from urllib.parse import urlencode

import httpx2
import jwt
import structlog

from fedhpc.domain.service import Algorithm, FacadeConfig, ServiceConfig
from fedhpc.service.verifier import KeyCache, Rejected

__all__ = ["Upstream", "UpstreamRefused", "pkce_pair", "token_sets"]

log = structlog.get_logger(__name__)


class UpstreamRefused(Exception):
    """The upstream provider refused a code or a refresh token (`error` is its OAuth code)."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


def pkce_pair() -> tuple[str, str]:
    """(verifier, S256 challenge) for fedhpc's own request upstream (RFC 7636)."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
    return verifier, challenge.rstrip(b"=").decode()


def token_sets(answer: Mapping[str, Any], now: float) -> list[dict[str, Any]]:
    """A token endpoint's answer as token sets: the main one, and Globus Auth's `other_tokens`
    (one per resource server: Transfer, Compute), each with its own refresh token."""
    out = []
    for item in [answer, *answer.get("other_tokens", ())]:
        if not isinstance(item, Mapping) or not isinstance(item.get("access_token"), str):
            continue
        expires_in = item.get("expires_in")
        out.append(
            {
                "resource_server": str(item.get("resource_server", "")),
                "scope": str(item.get("scope", "")),
                "access_token": item["access_token"],
                "refresh_token": item.get("refresh_token"),
                "expires_at": now + float(expires_in) if isinstance(expires_in, int) else None,
            }
        )
    return out


class Upstream:
    """One provider (`config.issuer`) and fedhpc's client there (`config.facade`)."""

    def __init__(
        self, config: ServiceConfig, secret: str, http: httpx2.AsyncClient, keys: KeyCache
    ) -> None:
        assert config.facade is not None
        self.config = config
        self.facade: FacadeConfig = config.facade
        self._auth = (self.facade.client_id, secret)
        self._http = http
        self._keys = keys
        self._meta: Mapping[str, Any] | None = None

    async def aclose(self) -> None:
        await self._http.aclose()

    async def metadata(self) -> Mapping[str, Any]:
        if self._meta is None:
            issuer = self.config.issuer.rstrip("/")
            answer = await self._http.get(f"{issuer}/.well-known/openid-configuration")
            meta = answer.json() if answer.status_code == 200 else None
            if not isinstance(meta, dict) or str(meta.get("issuer", "")).rstrip("/") != issuer:
                raise Rejected(f"no usable discovery document at {issuer}")
            self._meta = meta
        return self._meta

    async def authorize_url(self, state: str, nonce: str, challenge: str, redirect: str) -> str:
        meta = await self.metadata()
        scopes = dict.fromkeys(["openid", *self.facade.scopes])  # openid first, no repeats
        query = {
            **self.facade.authorize_params,
            "response_type": "code",
            "client_id": self.facade.client_id,
            "redirect_uri": redirect,
            "scope": " ".join(scopes),
            "state": state,
            "nonce": nonce,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
        return f"{meta['authorization_endpoint']}?{urlencode(query)}"

    async def _token(self, form: dict[str, str]) -> dict[str, Any]:
        meta = await self.metadata()
        answer = await self._http.post(str(meta["token_endpoint"]), data=form, auth=self._auth)
        try:
            body = answer.json()
        except ValueError:
            body = None
        if answer.status_code != 200 or not isinstance(body, dict):
            error = body.get("error") if isinstance(body, dict) else None
            raise UpstreamRefused(str(error or f"http {answer.status_code}")[:64])
        return body

    async def exchange(self, code: str, verifier: str, redirect: str) -> dict[str, Any]:
        return await self._token(
            {
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": redirect,
                "code_verifier": verifier,
            }
        )

    async def identity(self, answer: Mapping[str, Any], nonce: str) -> dict[str, Any]:
        """The person the answer is for: the ID token checked (signature, iss, aud = fedhpc's
        client, exp, nonce), completed by the userinfo endpoint for the same `sub`."""
        id_token = answer.get("id_token")
        if not isinstance(id_token, str):
            raise Rejected("the provider sent no ID token (is openid among the scopes?)")
        header = jwt.get_unverified_header(id_token)
        meta = await self.metadata()
        # The provider's own ID token algorithms count too (asymmetric ones only): Globus
        # Auth's need not be among those configured for access tokens.
        listed = meta.get("id_token_signing_alg_values_supported")
        allowed = set(self.config.algorithms) | (
            set(listed) & set(get_args(Algorithm)) if isinstance(listed, list) else set()
        )
        if header.get("alg") not in allowed:
            raise Rejected(f"the ID token is signed with {str(header.get('alg'))[:16]!r}")
        key = await self._keys.key(header.get("kid"))
        claims: dict[str, Any] = jwt.decode(
            id_token,
            key=key,
            algorithms=[str(header["alg"])],
            audience=self.facade.client_id,
            issuer=self.config.issuer,
            leeway=self.config.leeway_s,
            options={"require": ["exp", "iss", "aud", "sub"]},
        )
        if claims.get("nonce") != nonce:
            raise Rejected("the ID token's nonce is not this sign-in's")
        userinfo = meta.get("userinfo_endpoint")
        access = answer.get("access_token")
        if isinstance(userinfo, str) and isinstance(access, str):
            got = await self._http.get(userinfo, headers={"authorization": f"Bearer {access}"})
            extra = got.json() if got.status_code == 200 else None
            if isinstance(extra, dict) and extra.get("sub") == claims["sub"]:
                claims = {**extra, **claims}
        keep = ("iss", "sub", "email", "email_verified", "preferred_username", "name")
        return {k: claims[k] for k in keep if k in claims}

    async def refresh(self, token_set: dict[str, Any], now: float) -> dict[str, Any]:
        """The set refreshed (its refresh token rotated when the provider rotates it)."""
        body = await self._token(
            {"grant_type": "refresh_token", "refresh_token": str(token_set["refresh_token"])}
        )
        fresh = token_sets(body, now)
        if not fresh:
            raise UpstreamRefused("no access token in the refresh answer")
        return {
            **token_set,
            "access_token": fresh[0]["access_token"],
            "refresh_token": fresh[0]["refresh_token"] or token_set["refresh_token"],
            "expires_at": fresh[0]["expires_at"],
        }
