"""Placement inputs and notes that follow from the request: which sites can hold an absolute
workdir and absolute outputs, and the line that says a fixed-site task fell back to another site."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from fedhpc.domain.config import Site
from fedhpc.ops.workdir import sites_holding
from fedhpc.placement import Placement
from fedhpc.placement.policy import PolicyKind

__all__ = ["fallback_note", "sites_without", "sites_without_all"]


def sites_without(workdir: str | None, sites: Mapping[str, Site]) -> set[str]:
    """Sites none of whose storage roots contain an absolute `workdir` (none for relative). A
    `$NAME` root (expanded by the site's shell) may contain it: dispatch decides."""
    if not workdir or not workdir.startswith("/"):
        return set()
    holding = sites_holding(workdir, (s.profile for s in sites.values()))
    return set(sites) - holding


def sites_without_all(paths: Iterable[str | None], sites: Mapping[str, Site]) -> set[str]:
    """Sites that cannot hold one of `paths` (the workdir and the outputs) by `sites_without`."""
    out: set[str] = set()
    for path in paths:
        out |= sites_without(path, sites)
    return out


def fallback_note(p: Placement) -> str:
    """'fell back from X (why); ' when a fixed-site task runs elsewhere, else ''."""
    policy = p.trace.policy
    if policy.kind is not PolicyKind.FIXED_SITE or not policy.site or p.site == policy.site:
        return ""
    why = next(iter(p.trace.site_reasons(policy.site)), "not among the usable sites")
    return f"FALLBACK from fixed site {policy.site} ({why}): "
