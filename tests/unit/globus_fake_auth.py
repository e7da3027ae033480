"""A fake Globus Auth for offline tests, on `responses` and `globus_sdk.testing`: a signing key
and its JWK, the OIDC configuration, the code exchange, refresh with rotation, userinfo and
revocation. Tokens are canaries so tests can prove they never leak."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import jwt
import responses
from cryptography.hazmat.primitives.asymmetric import rsa
from globus_sdk.testing import RegisteredResponse, load_response
from jwt.algorithms import RSAAlgorithm

from fedhpc.globus_auth.scopes import COMPUTE_RS, COMPUTE_SCOPE, TRANSFER_RS, TRANSFER_SCOPE

AUTH = "https://auth.globus.org"
TOKEN_URL = f"{AUTH}/v2/oauth2/token"
REVOKE_URL = f"{AUTH}/v2/oauth2/token/revoke"
CLIENT_ID = "3f1d1e4a-5b6c-4d7e-8f90-a1b2c3d4e5f6"
IDENTITY = "a0b1c2d3-e4f5-4a6b-8c7d-0123456789ab"
CANARY = "CANARY-tok-" + uuid.uuid4().hex[:12]


@dataclass
class FakeAuth:
    """Issues `<CANARY>-<rs>-<kind>-<n>` tokens; `expires_in` is what access tokens get."""

    expires_in: int = 172800
    refresh_fails: bool = False
    generation: dict[str, int] = field(default_factory=dict)
    posts: list[dict[str, list[str]]] = field(default_factory=list)
    revoked: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def token(self, rs: str, kind: str) -> str:
        return f"{CANARY}-{rs}-{kind}-{self.generation.get(rs, 1)}"

    def all_tokens(self) -> set[str]:
        return {self.token(rs, k) for rs in self.generation for k in ("access", "refresh")}

    # -- responses --------------------------------------------------------------------------
    def register(self) -> None:
        jwk = json.loads(RSAAlgorithm.to_jwk(self.key.public_key()))
        jwk.update(kid="test", alg="RS256", use="sig")
        load_response(
            RegisteredResponse(
                service="auth",
                method="GET",
                path="/.well-known/openid-configuration",
                json={
                    "issuer": AUTH,
                    "jwks_uri": f"{AUTH}/jwk.json",
                    "id_token_signing_alg_values_supported": ["RS256"],
                },
            )
        )
        load_response(
            RegisteredResponse(service="auth", method="GET", path="/jwk.json", json={"keys": [jwk]})
        )
        load_response(
            RegisteredResponse(
                service="auth",
                method="GET",
                path="/v2/oauth2/userinfo",
                json={
                    "sub": IDENTITY,
                    "preferred_username": "alice@uni.edu",
                    "name": "Alice",
                    "email": "alice@uni.edu",
                },
            )
        )
        responses.add_callback(
            responses.POST, TOKEN_URL, callback=self._token, content_type="application/json"
        )
        responses.add_callback(
            responses.POST, REVOKE_URL, callback=self._revoke, content_type="application/json"
        )

    def _id_token(self) -> str:
        now = int(time.time())
        claims = {
            "sub": IDENTITY,
            "iss": AUTH,
            "aud": CLIENT_ID,
            "iat": now,
            "exp": now + 600,
            "preferred_username": "alice@uni.edu",
        }
        return jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": "test"})

    def _doc(self, rs: str, scope: str) -> dict[str, Any]:
        return {
            "access_token": self.token(rs, "access"),
            "refresh_token": self.token(rs, "refresh"),
            "scope": scope,
            "resource_server": rs,
            "expires_in": self.expires_in,
            "token_type": "Bearer",
        }

    def _token(self, request: Any) -> tuple[int, dict[str, str], str]:
        body = parse_qs(request.body if isinstance(request.body, str) else request.body.decode())
        self.posts.append(body)
        grant = body["grant_type"][0]
        if grant == "authorization_code":
            for rs in ("auth.globus.org", COMPUTE_RS, TRANSFER_RS):
                self.generation.setdefault(rs, 1)
            doc = self._doc("auth.globus.org", "openid profile email")
            doc["id_token"] = self._id_token()
            doc["other_tokens"] = [
                self._doc(COMPUTE_RS, COMPUTE_SCOPE),
                self._doc(TRANSFER_RS, TRANSFER_SCOPE),
            ]
            return 200, {}, json.dumps(doc)
        if grant == "refresh_token":
            if self.refresh_fails:
                return 400, {}, json.dumps({"error": "invalid_grant"})
            presented = body["refresh_token"][0]
            holder = next(
                (r for r in self.generation if self.token(r, "refresh") == presented), None
            )
            if holder is None:  # an old, already rotated refresh token
                return 400, {}, json.dumps({"error": "invalid_grant"})
            self.generation[holder] += 1  # rotation: the old refresh token is dead now
            scope = {COMPUTE_RS: COMPUTE_SCOPE, TRANSFER_RS: TRANSFER_SCOPE}.get(
                holder, "openid profile email"
            )
            doc = self._doc(holder, scope)
            doc["other_tokens"] = []
            return 200, {}, json.dumps(doc)
        return 400, {}, json.dumps({"error": "unsupported_grant_type"})

    def _revoke(self, request: Any) -> tuple[int, dict[str, str], str]:
        body = parse_qs(request.body if isinstance(request.body, str) else request.body.decode())
        self.revoked.append(body["token"][0])
        return 200, {}, json.dumps({"active": False})
