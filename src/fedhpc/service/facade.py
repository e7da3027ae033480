"""`Facade`: fedhpc as the MCP clients' authorization server, for upstream providers without
dynamic client registration or JWT access tokens (Globus Auth). The MCP SDK serves the OAuth
endpoints (`create_auth_routes`: metadata, /register, /authorize, /token, /revoke) over this
`OAuthAuthorizationServerProvider`; `/callback` is fedhpc's own return from the upstream sign-in.

The flow: a client registers here and sends the person to /authorize; the facade sends them
upstream with its own state, nonce and PKCE; /callback exchanges the upstream code, checks the
person, seals their upstream tokens into the store and sends the browser back to the client
with fedhpc's own code. /token trades that code (the client's PKCE) for a short-lived access
token and a refresh token; each refresh rotates it, and a refresh token used twice revokes its
whole family (every access token of the sign-in included)."""

from __future__ import annotations

import secrets
from typing import Any
from urllib.parse import urlencode

import httpx2
import jwt
import structlog
from mcp.server.auth.provider import (
    AuthorizationCode,
    AuthorizationParams,
    AuthorizeError,
    OAuthAuthorizationServerProvider,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from fedhpc.domain.service import ServiceConfig
from fedhpc.service import consent
from fedhpc.service.access import ADMIN, DATA, READ, SUBMIT
from fedhpc.service.facade_store import FacadeStore
from fedhpc.service.facade_tokens import FacadeAccessToken, FacadeVerifier, Signer, held_scopes
from fedhpc.service.upstream import Upstream, UpstreamRefused, pkce_pair, token_sets
from fedhpc.service.upstream_refresh import UpstreamRefresher
from fedhpc.service.verifier import Rejected, admitted

__all__ = ["CALLBACK_PATH", "CONSENT_PATH", "Facade", "FacadeCode", "FacadeRefreshToken"]

log = structlog.get_logger(__name__)

CALLBACK_PATH = "/callback"
CONSENT_PATH = consent.CONSENT_PATH
_GRANTABLE = (READ, SUBMIT, DATA)


class FacadeCode(AuthorizationCode):
    """A code of fedhpc's, with the person the upstream sign-in found."""

    identity: dict[str, Any]


class FacadeRefreshToken(RefreshToken):
    family: str
    identity: dict[str, Any]


def person_of(identity: dict[str, Any]) -> str:
    return f"{identity['iss']}|{identity['sub']}"


class Facade(OAuthAuthorizationServerProvider[FacadeCode, FacadeRefreshToken, FacadeAccessToken]):
    """The SDK's OAuthAuthorizationServerProvider, backed by `FacadeStore` (subclassed, not
    only matched: the SDK's default refusal of the identity-assertion grant is kept)."""

    def __init__(
        self,
        config: ServiceConfig,
        store: FacadeStore,
        signer: Signer,
        upstream: Upstream,
    ) -> None:
        assert config.facade is not None
        self.config = config
        self.facade = config.facade
        self.store = store
        self.signer = signer
        self.refresher = UpstreamRefresher(store, upstream, self.facade.upstream_refresh_margin_s)
        self.verifier = FacadeVerifier(config, signer, store)
        self.callback_url = config.own_issuer + CALLBACK_PATH
        self.consent_url = config.own_issuer + CONSENT_PATH

    @property
    def upstream(self) -> Upstream:
        """fedhpc's one client at the provider: sign-ins and refreshes go through it (held by
        the refresher, so replacing it here replaces it for refreshes too)."""
        return self.refresher.upstream

    @upstream.setter
    def upstream(self, upstream: Upstream) -> None:
        self.refresher.upstream = upstream

    # Clients (RFC 7591 registration; the SDK's handler validates the metadata).
    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        info = await self.store.client(client_id)
        return OAuthClientInformationFull.model_validate_json(info) if info else None

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None  # the SDK's handler assigns one
        await self.store.put_client(client_info.client_id, client_info.model_dump_json())
        log.info("client registered", client_id=client_info.client_id)

    def _granted(self, asked: list[str] | None, sub: str | None) -> list[str]:
        wanted = set(asked) if asked else set(_GRANTABLE)
        granted = (wanted & set(_GRANTABLE)) | {READ}  # every request needs READ
        if ADMIN in wanted and sub is not None and sub in self.facade.admin_subjects:
            granted.add(ADMIN)
        return sorted(granted)

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        if params.resource is not None and params.resource.rstrip("/") != (
            self.config.resource.rstrip("/")
        ):
            raise AuthorizeError("invalid_target", "this server issues tokens for its MCP URL only")
        state, nonce = secrets.token_urlsafe(32), secrets.token_urlsafe(16)
        verifier, challenge = pkce_pair()
        record = {
            "client_id": client.client_id,
            "params": params.model_dump(mode="json"),
            "nonce": nonce,
            "verifier": verifier,
            "challenge": challenge,
            "consented": False,
        }
        await self.store.put_pending(state, record, consent.PENDING_TTL_S)
        # The person is asked first (`consent`): fedhpc's one upstream client serves every
        # registered client, so the upstream sign-in alone says nothing about which.
        return f"{self.consent_url}?{urlencode({'request': state})}"

    async def consent(self, request: Request) -> Response:
        """GET: the page asking the person whether this client may act for them. POST (from
        that page only): their answer; an approval sends them upstream."""
        own = self.config.own_issuer
        if request.method != "POST":
            state = request.query_params.get("request") or ""
            pending = await self.store.pending(state) if state else None
            client = await self.store.client(pending["client_id"]) if pending else None
            if pending is None or client is None or pending.get("consented"):
                return consent.refusal("This sign-in expired: start again from your client.", 400)
            params = AuthorizationParams.model_validate(pending["params"])
            info = OAuthClientInformationFull.model_validate_json(client)
            # What the sign-in will grant (admin only to admin_subjects, known after it).
            shown = self._granted(params.scopes, None)
            shown += [ADMIN] if params.scopes and ADMIN in params.scopes else []
            return consent.page(own, state, info.model_dump(mode="json"), params, shown)
        posted = await consent.posted_token(request, own)
        if posted is None:
            return consent.refusal("Answer from fedhpc's own page: start again.", 403)
        state, decision = posted
        pending = await self.store.take_pending(state)
        if pending is None or pending.get("consented"):
            return consent.refusal("This sign-in expired: start again from your client.", 400)
        params = AuthorizationParams.model_validate(pending["params"])
        if decision != "allow":
            log.info("client not allowed by the person", client_id=pending["client_id"])
            return consent.denied(own, params)
        await self.store.put_pending(state, {**pending, "consented": True}, consent.PENDING_TTL_S)
        try:
            url = await self.upstream.authorize_url(
                state, pending["nonce"], pending["challenge"], self.callback_url
            )
        except (Rejected, httpx2.HTTPError, ValueError) as exc:
            log.warning("the upstream provider cannot be used", reason=str(exc)[:200])
            return consent.refusal("The sign-in provider is unreachable: try again later.", 503)
        answer = RedirectResponse(url, status_code=302, headers={"Cache-Control": "no-store"})
        answer.delete_cookie(consent.cookie_name(own), path="/")
        return answer

    async def callback(self, request: Request) -> Response:
        """The upstream provider's redirect back: on to the client with fedhpc's code."""
        state = request.query_params.get("state") or ""
        # Only a sign-in the person allowed on the consent page is taken (and only once).
        asked = await self.store.pending(state) if state else None
        pending = await self.store.take_pending(state) if asked and asked["consented"] else None
        if pending is None:
            return HTMLResponse(
                "This sign-in expired or was already completed: start again from your client.",
                status_code=400,
            )
        params = AuthorizationParams.model_validate(pending["params"])

        def back(**values: str | None) -> Response:
            url = construct_redirect_uri(
                str(params.redirect_uri), state=params.state, iss=self.config.own_issuer, **values
            )
            return RedirectResponse(url, status_code=302, headers={"Cache-Control": "no-store"})

        if request.query_params.get("error") or not request.query_params.get("code"):
            return back(error="access_denied", error_description="the sign-in was not completed")
        try:
            answer = await self.upstream.exchange(
                request.query_params["code"], pending["verifier"], self.callback_url
            )
            identity = await self.upstream.identity(answer, pending["nonce"])
        except (
            UpstreamRefused,
            Rejected,
            jwt.PyJWTError,
            httpx2.HTTPError,
            ValueError,
            KeyError,
        ) as exc:
            log.warning("upstream sign-in refused", reason=str(exc)[:200])
            return back(error="access_denied", error_description="the sign-in provider refused")
        if not admitted(self.config, identity):
            log.info("sign-in refused", reason="identity not allowed", sub=identity.get("sub"))
            return back(error="access_denied", error_description="you may not use this service")
        now = self.store.clock()
        await self.store.put_upstream(person_of(identity), {"sets": token_sets(answer, now)})
        code = secrets.token_urlsafe(32)
        record = {
            **params.model_dump(mode="json", exclude={"state"}),
            "client_id": pending["client_id"],
            "scopes": self._granted(params.scopes, identity.get("sub")),
            "identity": identity,
            "expires_at": now + self.facade.code_ttl_s,
        }
        await self.store.put_code(code, record, record["expires_at"])
        log.info("signed in upstream", sub=identity["sub"], client_id=pending["client_id"])
        return back(code=code)

    # Codes (single use; a replayed code revokes what it was exchanged for, RFC 9700 4.2.3).
    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> FacadeCode | None:
        found = await self.store.code(authorization_code)
        if found is None:
            return None
        record, family = found
        if family is not None:
            await self.store.revoke_family(family)
            log.warning("an authorization code was used twice", client_id=client.client_id)
            return None
        if record["client_id"] != client.client_id:
            return None
        return FacadeCode(
            code=authorization_code,
            scopes=record["scopes"],
            expires_at=float(record["expires_at"]),
            client_id=record["client_id"],
            code_challenge=record["code_challenge"],
            redirect_uri=record["redirect_uri"],
            redirect_uri_provided_explicitly=record["redirect_uri_provided_explicitly"],
            resource=record.get("resource"),
            subject=record["identity"]["sub"],
            identity=record["identity"],
        )

    async def _issue(
        self,
        client_id: str,
        identity: dict[str, Any],
        scopes: list[str],
        family: str,
    ) -> OAuthToken:
        now = self.store.clock()
        ttl = self.facade.access_token_ttl_s
        access = self.signer.mint(
            identity=identity,
            client_id=client_id,
            scopes=scopes,
            family=family,
            resource=self.config.resource,
            now=now,
            ttl_s=ttl,
        )
        refresh = secrets.token_urlsafe(32)
        expires_at = int(now) + self.facade.refresh_token_ttl_s
        record = {
            "client_id": client_id,
            "scopes": scopes,
            "identity": identity,
            "expires_at": expires_at,
        }
        await self.store.put_refresh(refresh, family, record, expires_at)
        return OAuthToken(
            access_token=access,
            token_type="Bearer",  # noqa: S106 (the scheme's name, not a secret)
            expires_in=ttl,
            scope=" ".join(scopes),
            refresh_token=refresh,
        )

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: FacadeCode
    ) -> OAuthToken:
        family = secrets.token_urlsafe(16)
        if not await self.store.use_code(authorization_code.code, family):
            # Two exchanges raced on one code: what the other got is revoked, as on a replay.
            spent = await self.store.code(authorization_code.code)
            if spent is not None and spent[1] is not None:
                await self.store.revoke_family(spent[1])
            raise TokenError("invalid_grant", "authorization code already used")
        assert client.client_id is not None
        identity = authorization_code.identity
        await self.store.new_family(family, person_of(identity), client.client_id)
        return await self._issue(client.client_id, identity, authorization_code.scopes, family)

    # Refresh tokens: rotated on every use; a used one presented again revokes its family.
    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> FacadeRefreshToken | None:
        found = await self.store.refresh(refresh_token)
        if found is None:
            return None
        record, family, used = found
        if used:
            await self.store.revoke_family(family)
            log.warning(
                "a refresh token was used twice: its sign-in is revoked",
                client_id=client.client_id,
                sub=record["identity"].get("sub"),
            )
            return None
        if record["client_id"] != client.client_id or not await self.store.family_live(family):
            return None
        if not admitted(self.config, record["identity"]):  # taken off the allow-list since
            await self.store.revoke_family(family)
            log.info("sign-in ended", reason="identity not allowed", sub=record["identity"]["sub"])
            return None
        return FacadeRefreshToken(
            token=refresh_token,
            client_id=record["client_id"],
            scopes=held_scopes(self.config, record["scopes"], record["identity"]["sub"]),
            expires_at=int(record["expires_at"]),
            resource=self.config.resource,
            subject=record["identity"]["sub"],
            family=family,
            identity=record["identity"],
        )

    async def exchange_refresh_token(
        self,
        client: OAuthClientInformationFull,
        refresh_token: FacadeRefreshToken,
        scopes: list[str],
    ) -> OAuthToken:
        if not await self.store.use_refresh(refresh_token.token):
            await self.store.revoke_family(refresh_token.family)
            raise TokenError("invalid_grant", "refresh token already used")
        identity = refresh_token.identity
        if not await self.refresh_upstream(person_of(identity)):
            await self.store.revoke_family(refresh_token.family)
            raise TokenError("invalid_grant", "the upstream sign-in ended: sign in again")
        assert client.client_id is not None
        return await self._issue(client.client_id, identity, scopes, refresh_token.family)

    async def refresh_upstream(self, person: str) -> bool:
        """Refresh the person's upstream token sets that expire within the margin; False when
        the provider refused a refresh token (service/upstream_refresh.py)."""
        return await self.refresher.refresh(person)

    async def aclose(self) -> None:
        await self.store.aclose()
        await self.upstream.aclose()

    async def load_access_token(self, token: str) -> FacadeAccessToken | None:
        return await self.verifier.verify_token(token)

    async def revoke_token(self, token: FacadeAccessToken | FacadeRefreshToken) -> None:
        await self.store.revoke_family(token.family)
        log.info("sign-in revoked", client_id=token.client_id, sub=token.subject)
