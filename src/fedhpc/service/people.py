"""`FacadeTokens`: the `PersonTokens` seam over the facade's store, for the daemon of
`fedhpc service` with `[service.facade]`. A person's Globus Compute or Transfer token is read
from the sealed store, refreshed through the facade's own refresh path when due (one refresh
per person at a time), and handed only to the SDK's authorizer: never to a log, an event or
an answer. The daemon reaches the store file the endpoint writes (the same home and key)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from fedhpc.domain.service import ServiceConfig
from fedhpc.globus_auth.people import (
    PersonNotAuthorized,
    PersonService,
    refusal_of,
    token_set,
)
from fedhpc.profiles.loader import load_user_config, user_config_path
from fedhpc.service import ServiceAuth
from fedhpc.service.facade import Facade
from fedhpc.settings import fedhpc_home

__all__ = ["FacadeTokens", "facade_tokens", "people_from_config"]


def _stamp(access_token: object) -> str:
    """What an endpoint's refusal is tied to: the token it refused (as a digest), so a new
    sign-in or a refresh lets the person be tried there again."""
    return hashlib.sha256(str(access_token).encode()).hexdigest()


class FacadeTokens:
    """Each person's upstream tokens, as the facade keeps them (`PersonTokens`)."""

    def __init__(self, facade: Facade) -> None:
        self.facade = facade
        # (person, service, site) -> the token digest the site's endpoint refused
        self._refused_at: dict[tuple[str, str, str], str] = {}

    async def refusal(self, person: str, service: PersonService, site: str) -> str | None:
        stored = await self.facade.store.upstream(person)
        why = refusal_of(stored, service, site)
        if why is not None:
            return why
        held = token_set(stored, service) or {}
        if self._refused_at.get((person, service, site)) == _stamp(held.get("access_token")):
            what = "Globus Compute" if service == "compute" else "Globus Transfer"
            return (
                f"{site} runs each person's work as that person: its endpoint refused your "
                f"{what} authorization; sign in to fedhpc again through your MCP client, "
                f"granting {what}, or ask the endpoint's owner to allow your identity"
            )
        return None

    async def access_token(self, person: str, service: PersonService) -> str:
        held = token_set(await self.facade.store.upstream(person), service)
        margin = self.facade.facade.upstream_refresh_margin_s
        expires = held.get("expires_at") if held else None
        due = expires is not None and float(expires) - margin <= self.facade.store.clock()
        if due and not await self.facade.refresh_upstream(person):
            raise PersonNotAuthorized(
                "the provider refused to refresh your upstream authorization", service
            )
        stored = await self.facade.store.upstream(person)
        why = refusal_of(stored, service)
        held = token_set(stored, service)
        if why is not None or held is None:
            raise PersonNotAuthorized(why or "no upstream authorization", service)
        return str(held["access_token"])

    async def endpoint_refused(self, person: str, service: PersonService, site: str) -> None:
        # Tied to the token as stored now: the one just refused, unless a refresh replaced
        # it meanwhile (then the next placement tries the new one).
        held = token_set(await self.facade.store.upstream(person), service) or {}
        self._refused_at[(person, service, site)] = _stamp(held.get("access_token"))

    async def aclose(self) -> None:
        await self.facade.aclose()


def facade_tokens(config: ServiceConfig, home: Path) -> FacadeTokens:
    """The daemon's `FacadeTokens`: the facade as `fedhpc service` builds it (the same store,
    keys and upstream client), used here for its store and its refresh path only."""
    auth = ServiceAuth.from_config(config, home)
    assert auth.facade is not None  # a config with [service.facade]
    return FacadeTokens(auth.facade)


def people_from_config() -> FacadeTokens | None:
    """The daemon's `FacadeTokens` when the user config has `[service.facade]`, else None."""
    service = load_user_config(user_config_path()).service
    if service is None or service.facade is None:
        return None
    return facade_tokens(service, fedhpc_home())
