"""Service mode: the sites a person may not be placed on because they run each person's work
as that person (`identity = "person"`) and this person holds no usable authorization there
(`globus_auth.people`). Read once per person and placement pass: a store read per site, never
a network call."""

from __future__ import annotations

from collections.abc import Mapping

from fedhpc.domain.config import Site
from fedhpc.globus_auth.people import installed

__all__ = ["refused_sites"]


async def refused_sites(owner: str, sites: Mapping[str, Site]) -> dict[str, str]:
    """Per per-person site `owner` cannot run at: why, with the action."""
    tokens = installed()
    out: dict[str, str] = {}
    for name in sorted(sites):
        if sites[name].user.identity != "person":
            continue
        if tokens is None:
            out[name] = (
                f"{name} runs each person's work as that person, and this daemon keeps "
                "nobody's tokens: the operator must configure [service.facade]"
            )
        elif (why := await tokens.refusal(owner, "compute", name)) is not None:
            out[name] = why
    return out
