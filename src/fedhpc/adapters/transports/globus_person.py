"""The Globus Compute transport's per-person side (service mode, `identity = "person"`): the
client of the person a command is issued for (`acting_for`), and an endpoint's refusal of
their token as a typed `PersonNotAuthorized`. The SDKs load only when a person's call runs."""

from __future__ import annotations

from typing import Any

from fedhpc.globus_auth.people import PersonNotAuthorized, acting_person, installed

__all__ = ["person_client", "person_refused"]


def person_client(site: str) -> Any | None:
    """The Compute client of the person acting now (None: nobody, the service's identity)."""
    person = acting_person()
    if person is None:
        return None
    tokens = installed()
    if tokens is None:
        raise PersonNotAuthorized(
            f"{site} runs each person's work as that person, and this daemon keeps nobody's "
            "tokens ([service.facade] is not configured)"
        )
    # startup: the Globus SDKs only when a Globus site or login is used
    from fedhpc.globus_auth.apps import person_compute_client

    return person_compute_client(tokens, person)


async def person_refused(exc: Exception, site: str) -> PersonNotAuthorized | None:
    """`exc` as the endpoint's refusal of the acting person's token (401, 403), recorded so
    that `site` stops being a candidate for their tasks until their tokens change; None when
    nobody acts or it is another error."""
    person = acting_person()
    if person is None:
        return None
    # startup: the Globus SDKs only when a Globus site or login is used
    import globus_sdk

    if not isinstance(exc, globus_sdk.GlobusAPIError) or exc.http_status not in (401, 403):
        return None
    tokens = installed()
    if tokens is not None:
        await tokens.endpoint_refused(person, "compute", site)
    return PersonNotAuthorized(
        f"{site}'s Globus Compute endpoint refused your authorization (HTTP {exc.http_status})"
    )
