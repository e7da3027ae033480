"""Service mode: the sites a person may not be placed on because they run each person's work
as that person (`identity = "person"`) and this person holds no usable authorization there
(`globus_auth.people`). Read once per person and placement pass: a store read per site, never
a network call."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, TypeVar

from fedhpc.domain.config import Site
from fedhpc.globus_auth.people import installed
from fedhpc.orchestrator.records import TaskRecord

__all__ = ["by_owner", "per_person", "refused_sites"]


class _Owned(Protocol):
    @property
    def task_id(self) -> str: ...


class _Tasks(Protocol):
    async def load_task(self, task_id: str) -> TaskRecord: ...


A = TypeVar("A", bound=_Owned)


def per_person(site: Site | None) -> bool:
    """Whether `site` runs each person's commands as that person."""
    return site is not None and site.user.identity == "person"


async def by_owner(book: _Tasks, atts: Sequence[A]) -> dict[str | None, list[A]]:
    """`atts` by the person their task runs for (first seen first): at a per-person site,
    each person's jobs are observed and cancelled as that person (`acting_for`)."""
    owners: dict[str, str | None] = {}
    out: dict[str | None, list[A]] = {}
    for a in atts:
        if a.task_id not in owners:
            owners[a.task_id] = (await book.load_task(a.task_id)).owner
        out.setdefault(owners[a.task_id], []).append(a)
    return out


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
