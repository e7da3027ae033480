"""Service mode: each person's own Globus authorization, for sites marked
`identity = "person"` (docs/service.md, "Execution as the person").

The seam is `PersonTokens`: for a person (`issuer|sub`), whether they hold a usable upstream
token for Globus Compute or Transfer (`refusal`: a store read, no network call) and the
current access token (`access_token`: refreshed when due, through the facade). The daemon
installs one (`install`) when `[service.facade]` is configured; without one, no person is
authorized anywhere and per-person sites serve nobody's tasks. Whose call a site command is
is the context's (`acting_for`): the Compute transport reads it. Pure apart from that
context variable: importing this module loads no Globus SDK, and no token ever leaves it in
a message."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Literal, Protocol

from fedhpc.globus_auth.errors import GlobusLoginRequired
from fedhpc.globus_auth.scopes import COMPUTE_RS, TRANSFER_RS

__all__ = [
    "SIGN_IN_AGAIN",
    "PersonNotAuthorized",
    "PersonService",
    "PersonTokens",
    "acting_for",
    "acting_person",
    "install",
    "installed",
    "refusal_of",
    "token_set",
]

PersonService = Literal["compute", "transfer"]
_RESOURCE_SERVERS: dict[PersonService, str] = {"compute": COMPUTE_RS, "transfer": TRANSFER_RS}
_NAMES: dict[PersonService, str] = {"compute": "Globus Compute", "transfer": "Globus Transfer"}

# The action every refusal names; placement's hint recognizes a refusal by it.
SIGN_IN_AGAIN = "sign in to fedhpc again through your MCP client, granting {what}"


class PersonNotAuthorized(GlobusLoginRequired):
    """The person has no usable upstream authorization for the service a per-person site
    runs them with. A login-required failure (the dispatcher records it as one), whose way
    out is signing in to fedhpc again, not `fedhpc login`."""

    code = "person_not_authorized"

    def __init__(self, message: str, service: PersonService = "compute") -> None:
        super().__init__(message)
        action = SIGN_IN_AGAIN.format(what=_NAMES[service])
        self.hint = f"{action[0].upper()}{action[1:]} (the provider's consent page lists it), "
        self.hint += "then submit again."


class PersonTokens(Protocol):
    """A person's upstream tokens, as the service keeps them (the facade's store)."""

    async def refusal(self, person: str, service: PersonService, site: str) -> str | None:
        """Why `person` cannot be run at `site` with `service`, with the action; None when
        they hold a token for it. Reads the store only: no network call."""
        ...

    async def access_token(self, person: str, service: PersonService) -> str:
        """The person's current access token for `service`, refreshed first when due;
        `PersonNotAuthorized` when they hold none or the provider refused the refresh."""
        ...

    async def endpoint_refused(self, person: str, service: PersonService, site: str) -> None:
        """`site`'s endpoint refused the person's token: not a candidate for their tasks
        until their tokens change (a new sign-in, a refresh)."""
        ...

    async def aclose(self) -> None: ...


_installed: list[PersonTokens] = []
_acting: ContextVar[str | None] = ContextVar("fedhpc_acting_for", default=None)


def install(tokens: PersonTokens | None) -> None:
    """This process's person tokens (the daemon's, in service mode with the facade)."""
    _installed.clear()
    if tokens is not None:
        _installed.append(tokens)


def installed() -> PersonTokens | None:
    return _installed[0] if _installed else None


@contextmanager
def acting_for(person: str | None) -> Iterator[None]:
    """Site commands issued inside run for `person` (None: the service's own identity)."""
    token = _acting.set(person)
    try:
        yield
    finally:
        _acting.reset(token)


def acting_person() -> str | None:
    return _acting.get()


def token_set(stored: Mapping[str, Any] | None, service: PersonService) -> dict[str, Any] | None:
    """The person's token set for `service` among their stored sets (Globus Auth's
    `other_tokens` carry a `resource_server` each), or None."""
    sets: Sequence[Any] = (stored or {}).get("sets", ())
    wanted = _RESOURCE_SERVERS[service]
    for held in sets:
        if isinstance(held, dict) and held.get("resource_server") == wanted:
            return held
    return None


def refusal_of(
    stored: Mapping[str, Any] | None, service: PersonService, site: str | None = None
) -> str | None:
    """Why the person whose stored tokens are `stored` cannot run at `site` with `service`
    (never signed in through fedhpc, no consent for it, a refused refresh); None when they
    can. Names the action; never a token."""
    what = _NAMES[service]
    action = SIGN_IN_AGAIN.format(what=what)
    if stored is None:
        why = "you have not signed in through fedhpc's sign-in (no upstream tokens kept)"
    elif (held := token_set(stored, service)) is None:
        why = f"your sign-in did not grant {what}"
    elif held.get("refused"):
        why = f"the provider refused to refresh your {what} authorization"
    elif not held.get("access_token"):
        why = f"your {what} authorization is unusable"
    else:
        return None
    head = f"{site} runs each person's work as that person: " if site else ""
    return f"{head}{why}; {action}"
