"""`OidcVerifier`: the MCP SDK's TokenVerifier for JWT access tokens of one OIDC provider.

The keys come from the provider's JWKS, found through its discovery document and cached; a
token signed with a key id the cache lacks triggers one refresh (rate-limited), so a provider's
key rotation needs no restart. PyJWT checks the signature, `exp`/`nbf`, `iss` and `aud` (RFC
8707: the token must name fedhpc's resource URL). The token is never logged."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import httpx2
import jwt
import structlog
from mcp.server.auth.provider import AccessToken

from fedhpc.domain.service import ServiceConfig

__all__ = ["KeyCache", "OidcVerifier", "Rejected", "admitted"]

log = structlog.get_logger(__name__)

_TIMEOUT_S = 10.0
_MAX_DOCUMENT_BYTES = 1_000_000


class Rejected(Exception):
    """Why a token was refused (for the log; the client only sees 401)."""


class KeyCache:
    """The provider's signing keys by key id, fetched on first use and on an unknown id."""

    def __init__(
        self,
        config: ServiceConfig,
        http: httpx2.AsyncClient,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._http = http
        self._clock = clock
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at: float | None = None
        self._jwks_uri: str | None = None
        self._lock = anyio.Lock()
        self.fetches = 0

    async def _get_json(self, url: str) -> Mapping[str, Any]:
        response = await self._http.get(url, headers={"accept": "application/json"})
        if response.status_code != 200 or len(response.content) > _MAX_DOCUMENT_BYTES:
            raise Rejected(f"{url} answered {response.status_code}")
        body = response.json()
        if not isinstance(body, dict):
            raise Rejected(f"{url} is not a JSON object")
        return body

    async def _discover(self) -> str:
        issuer = self._config.issuer.rstrip("/")
        meta = await self._get_json(f"{issuer}/.well-known/openid-configuration")
        # OIDC Discovery 4.3: the document must name the issuer it was fetched for.
        if str(meta.get("issuer", "")).rstrip("/") != issuer:
            raise Rejected(f"the discovery document names issuer {meta.get('issuer')!r}")
        uri = meta.get("jwks_uri")
        if not isinstance(uri, str) or not uri.startswith(("https://", "http://")):
            raise Rejected("the discovery document has no jwks_uri")
        return uri

    async def _refresh(self) -> None:
        if self._jwks_uri is None:
            self._jwks_uri = await self._discover()
        document = await self._get_json(self._jwks_uri)
        try:
            keyset = jwt.PyJWKSet.from_dict(dict(document))
        except jwt.PyJWTError as exc:
            raise Rejected(f"the JWKS holds no usable key: {exc}") from None
        self._keys = {k.key_id: k for k in keyset.keys if k.key_id and k.public_key_use != "enc"}
        self._fetched_at = self._clock()
        self.fetches += 1
        log.info("fetched the provider's signing keys", keys=len(self._keys))

    async def key(self, kid: str | None) -> jwt.PyJWK:
        async with self._lock:
            if self._fetched_at is None:
                await self._refresh()
            elif kid not in self._keys:
                age = self._clock() - self._fetched_at
                if age >= self._config.jwks_min_refresh_s:
                    await self._refresh()  # the provider may have rotated its keys
        if kid is None and len(self._keys) == 1:
            return next(iter(self._keys.values()))
        if kid is None or kid not in self._keys:
            raise Rejected(f"no signing key with id {str(kid)[:64]!r}")
        return self._keys[kid]


def admitted(config: ServiceConfig, claims: Mapping[str, Any]) -> bool:
    """Whether the person these claims name may call: their `sub` is allowed, or their email
    (not marked unverified) is in an allowed domain."""
    sub = claims.get("sub")
    if isinstance(sub, str) and sub in config.allowed_subjects:
        return True
    email = claims.get("email")
    if not isinstance(email, str) or "@" not in email:
        return False
    if claims.get("email_verified") is False:
        return False
    domain = email.rsplit("@", 1)[1].lower()
    return domain in config.allowed_domains


def _scopes(claims: Mapping[str, Any]) -> list[str]:
    """RFC 9068 `scope` (space-separated); some providers send `scp` as a list."""
    scope = claims.get("scope")
    if isinstance(scope, str):
        return scope.split()
    scp = claims.get("scp")
    if isinstance(scp, list):
        return [s for s in scp if isinstance(s, str)]
    return []


class OidcVerifier:
    """TokenVerifier: a JWT access token from `config.issuer` for `config.resource`, held by
    an allowed person, or None (the SDK's bearer middleware answers 401)."""

    def __init__(self, config: ServiceConfig, http: httpx2.AsyncClient | None = None) -> None:
        self.config = config
        self._http = http or httpx2.AsyncClient(timeout=_TIMEOUT_S, follow_redirects=False)
        self.keys = KeyCache(config, self._http)
        resource = config.resource
        self._audiences = sorted({resource, resource.rstrip("/"), resource.rstrip("/") + "/"})

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _claims(self, token: str) -> dict[str, Any]:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise Rejected(f"not a JWT: {exc}") from None
        alg = header.get("alg")
        if alg not in self.config.algorithms:
            raise Rejected(f"signed with {str(alg)[:16]!r}, not one of the configured algorithms")
        key = await self.keys.key(header.get("kid"))
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key=key,
                algorithms=[alg],
                audience=self._audiences,
                issuer=self.config.issuer,
                leeway=self.config.leeway_s,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.PyJWTError as exc:
            raise Rejected(str(exc)) from None
        return claims

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            claims = await self._claims(token)
        except Rejected as exc:
            log.info("bearer token refused", reason=str(exc)[:200])
            return None
        except (httpx2.HTTPError, ValueError) as exc:
            log.warning("the identity provider could not be asked", error=type(exc).__name__)
            return None
        if not admitted(self.config, claims):
            log.info("bearer token refused", reason="identity not allowed", sub=claims.get("sub"))
            return None
        client_id = claims.get("client_id") or claims.get("azp") or ""
        return AccessToken(
            token=token,
            client_id=str(client_id),
            scopes=_scopes(claims),
            expires_at=int(claims["exp"]),
            resource=self.config.resource,
            subject=str(claims["sub"]),
            claims={k: claims[k] for k in ("iss", "email", "preferred_username") if k in claims},
        )
