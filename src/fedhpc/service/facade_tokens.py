"""fedhpc's own access tokens as the facade issues them: short-lived ES256 JWTs for the
resource, naming the person as the upstream provider knows them (`idp` + `sub`), and the
verifier the endpoint checks them with (`FacadeVerifier`, the SDK's TokenVerifier)."""

from __future__ import annotations

import hashlib
import secrets
from pathlib import Path
from typing import Any

import jwt
import structlog
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from mcp.server.auth.provider import AccessToken

from fedhpc.domain.service import ServiceConfig
from fedhpc.service.access import ADMIN
from fedhpc.service.facade_store import FacadeStore, made_once
from fedhpc.service.verifier import admitted

__all__ = ["FacadeAccessToken", "FacadeVerifier", "Signer", "held_scopes", "load_signing_key"]

log = structlog.get_logger(__name__)

_ALG = "ES256"
# The identity claims an access token carries from the upstream sign-in (for the allow-list
# check on every request and for `Caller.username`); never a token.
IDENTITY_CLAIMS = ("email", "email_verified", "preferred_username")


def load_signing_key(path: Path) -> ec.EllipticCurvePrivateKey:
    """The P-256 key in `path` (PEM), made (0600, in a 0700 folder) when the file is missing."""

    def make() -> bytes:
        return ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    key = serialization.load_pem_private_key(made_once(path, make), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{path} is not an EC private key (the facade signs with ES256)")
    return key


def held_scopes(config: ServiceConfig, scopes: list[str], sub: object) -> list[str]:
    """`scopes` as the operator's lists allow them now: `fedhpc:admin` only while `sub` is in
    `admin_subjects` (a token or a refresh token minted before they were removed keeps none)."""
    admins = config.facade.admin_subjects if config.facade is not None else ()
    return [s for s in scopes if s != ADMIN or sub in admins]


class FacadeAccessToken(AccessToken):
    """An access token the facade issued: its refresh-token family (revoked together)."""

    family: str


class Signer:
    """Mints the facade's access tokens."""

    def __init__(self, config: ServiceConfig, key: ec.EllipticCurvePrivateKey) -> None:
        self.config = config
        self.key = key
        public = key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        self.kid = hashlib.sha256(public).hexdigest()[:16]

    def mint(
        self,
        *,
        identity: dict[str, Any],
        client_id: str,
        scopes: list[str],
        family: str,
        resource: str,
        now: float,
        ttl_s: int,
    ) -> str:
        claims = {
            "iss": self.config.own_issuer,
            "aud": resource,
            "sub": identity["sub"],
            "idp": identity["iss"],
            "client_id": client_id,
            "scope": " ".join(scopes),
            "fam": family,
            "iat": int(now),
            "exp": int(now) + ttl_s,
            "jti": secrets.token_urlsafe(12),
            **{k: identity[k] for k in IDENTITY_CLAIMS if k in identity},
        }
        return jwt.encode(claims, self.key, algorithm=_ALG, headers={"kid": self.kid})


class FacadeVerifier:
    """TokenVerifier for the facade's own tokens: the signature, `exp`, `iss`, `aud` (the
    resource), a family not revoked, and the person still allowed. The caller's issuer is
    the upstream provider's (`idp`), so a person is the same `issuer|sub` as without it."""

    def __init__(self, config: ServiceConfig, signer: Signer, store: FacadeStore) -> None:
        self.config = config
        self._public = signer.key.public_key()
        self._store = store
        resource = config.resource
        self._audiences = sorted({resource, resource.rstrip("/"), resource.rstrip("/") + "/"})

    async def aclose(self) -> None:
        await self._store.aclose()

    async def verify_token(self, token: str) -> FacadeAccessToken | None:
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key=self._public,
                algorithms=[_ALG],
                audience=self._audiences,
                issuer=self.config.own_issuer,
                leeway=self.config.leeway_s,
                options={"require": ["exp", "iss", "aud", "sub", "idp", "fam"]},
            )
        except jwt.PyJWTError as exc:
            log.info("bearer token refused", reason=str(exc)[:200])
            return None
        if not await self._store.family_live(str(claims["fam"])):
            log.info("bearer token refused", reason="revoked", sub=claims.get("sub"))
            return None
        if not admitted(self.config, claims):
            log.info("bearer token refused", reason="identity not allowed", sub=claims.get("sub"))
            return None
        names = {k: claims[k] for k in ("email", "preferred_username") if k in claims}
        return FacadeAccessToken(
            token=token,
            client_id=str(claims.get("client_id", "")),
            scopes=held_scopes(self.config, str(claims.get("scope", "")).split(), claims["sub"]),
            expires_at=int(claims["exp"]),
            resource=self.config.resource,
            subject=str(claims["sub"]),
            claims={"iss": str(claims["idp"]), **names},
            family=str(claims["fam"]),
        )
