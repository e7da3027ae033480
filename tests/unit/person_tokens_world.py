"""People signed in through the facade, for the per-person site tests: the real facade (its
sealed SQLite store, its refresh path) over a stand-in upstream provider (an httpx2
MockTransport answering discovery and the token endpoint as Globus Auth does), and each
person's upstream token sets as the facade's callback stores them (`token_sets`)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2

from fedhpc.domain.service import ServiceConfig
from fedhpc.globus_auth.scopes import COMPUTE_RS, COMPUTE_SCOPE, TRANSFER_RS, TRANSFER_SCOPE
from fedhpc.service.facade import Facade
from fedhpc.service.facade_store import FacadeStore, Sealer, load_fernet_key
from fedhpc.service.facade_tokens import Signer, load_signing_key
from fedhpc.service.people import FacadeTokens
from fedhpc.service.upstream import Upstream, token_sets
from fedhpc.service.verifier import KeyCache

__all__ = [
    "ALICE",
    "BOB",
    "CAROL",
    "DAVE",
    "UPSTREAM",
    "answer",
    "canary",
    "facade_tokens",
    "sign_in",
]

UPSTREAM = "https://auth.globus.org"
ALICE, BOB = f"{UPSTREAM}|u-alice", f"{UPSTREAM}|u-bob"
CAROL, DAVE = f"{UPSTREAM}|u-carol", f"{UPSTREAM}|u-dave"


def canary(who: str, what: str) -> str:
    """A token value that must never leave the seam: searched for in logs, events, answers."""
    return f"canary-{what}-{who.rsplit('|', 1)[1]}-5f0c1d"


def answer(who: str, *, compute: bool = True, expires_in: int = 3600) -> dict[str, Any]:
    """Globus Auth's token answer for `who`: the Auth token, and in `other_tokens` Transfer
    always and Compute when they consented to it."""
    others = [
        {
            "resource_server": TRANSFER_RS,
            "scope": TRANSFER_SCOPE,
            "access_token": canary(who, "transfer"),
            "refresh_token": canary(who, "transfer-refresh"),
            "expires_in": expires_in,
        }
    ]
    if compute:
        others.append(
            {
                "resource_server": COMPUTE_RS,
                "scope": COMPUTE_SCOPE,
                "access_token": canary(who, "compute"),
                "refresh_token": canary(who, "compute-refresh"),
                "expires_in": expires_in,
            }
        )
    return {
        "resource_server": "auth.globus.org",
        "scope": "openid email profile",
        "access_token": canary(who, "auth"),
        "refresh_token": canary(who, "auth-refresh"),
        "expires_in": expires_in,
        "other_tokens": others,
    }


def _provider(refused: set[str], spent: list[str]) -> httpx2.MockTransport:
    """Globus Auth's discovery and token endpoint: a refresh token in `refused` (revoked) is
    answered invalid_grant; any other one gets a fresh access token for the same set. Every
    refresh token presented is appended to `spent`."""

    async def handle(request: httpx2.Request) -> httpx2.Response:
        if request.url.path.endswith("/.well-known/openid-configuration"):
            return httpx2.Response(
                200,
                json={
                    "issuer": UPSTREAM,
                    "authorization_endpoint": f"{UPSTREAM}/v2/oauth2/authorize",
                    "token_endpoint": f"{UPSTREAM}/v2/oauth2/token",
                    "jwks_uri": f"{UPSTREAM}/jwk.json",
                },
            )
        form = dict(x.split("=", 1) for x in (await request.aread()).decode().split("&"))
        spent.append(str(form.get("refresh_token")))
        await anyio.sleep(0.05)  # a provider's round trip: another caller may run meanwhile
        if form.get("refresh_token") in refused:
            return httpx2.Response(400, json={"error": "invalid_grant"})
        fresh = "renewed-" + str(form.get("refresh_token"))
        return httpx2.Response(200, text=json.dumps({"access_token": fresh, "expires_in": 3600}))

    return httpx2.MockTransport(handle)


def facade_tokens(
    tmp_path: Path, refused: frozenset[str] = frozenset(), spent: list[str] | None = None
) -> FacadeTokens:
    """The daemon's `FacadeTokens` over a real facade whose provider refuses `refused` (and
    records each refresh token presented in `spent`). Called twice with one `tmp_path`: two
    processes' facades over one store file and key, as the endpoint's and the daemon's."""
    secret = tmp_path / "upstream.secret"
    secret.write_text("s3cret\n")
    secret.chmod(0o600)
    config = ServiceConfig.model_validate(
        {
            "issuer": UPSTREAM,
            "resource": "https://fedhpc.example.org/mcp",
            "allowed_domains": ["lab.example"],
            "facade": {"client_id": "fedhpc", "client_secret_file": str(secret)},
        }
    )
    folder = tmp_path / "facade"
    store = FacadeStore(folder / "facade.db", Sealer(load_fernet_key(folder / "tokens.key")))
    http = httpx2.AsyncClient(transport=_provider(set(refused), [] if spent is None else spent))
    upstream = Upstream(config, "s3cret", http, KeyCache(config, http))
    signer = Signer(config, load_signing_key(folder / "signing-key.pem"))
    return FacadeTokens(Facade(config, store, signer, upstream))


async def sign_in(tokens: FacadeTokens, who: str, **kw: Any) -> None:
    """What the facade's callback stores for `who` after their upstream sign-in."""
    sets = token_sets(answer(who, **kw), time.time())
    await tokens.facade.store.put_upstream(who, {"sets": sets})
