"""Envelope validation beyond pydantic: units, unknown accelerator types, contradictions."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from fedhpc.domain.envelope import ResourceEnvelope
from fedhpc.domain.site import SiteProfile
from fedhpc.errors import FieldIssue, ValidationFailed

__all__ = ["known_accelerator_types", "merge_envelope", "normalize_envelope", "parse_envelope"]

# Below these, a number is far more likely a unit slip ('64' meant 64G, '2' meant 2h) than intent.
_MIN_PLAUSIBLE_MIB = 64
_MIN_PLAUSIBLE_WALL_S = 60


def known_accelerator_types(profiles: Iterable[SiteProfile]) -> frozenset[str]:
    """Every accelerator type (and GRES name) any profile's partitions offer."""
    out: set[str] = set()
    for profile in profiles:
        for part in profile.partitions:
            acc = part.node.accelerator
            if acc is not None:
                out.add(acc.type)
                out.add(acc.gres_type.lower())
    return frozenset(out)


def _loc(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "envelope"


def parse_envelope(data: ResourceEnvelope | Mapping[str, Any]) -> ResourceEnvelope:
    """A ResourceEnvelope from a mapping; pydantic's errors become one `FieldIssue` per field."""
    if isinstance(data, ResourceEnvelope):
        return data
    try:
        return ResourceEnvelope.model_validate(data)
    except ValidationError as exc:
        issues = [
            FieldIssue(_loc(tuple(e["loc"])), str(e["msg"]).removeprefix("Value error, "))
            for e in exc.errors()
        ]
        raise ValidationFailed(issues) from None


def merge_envelope(base: ResourceEnvelope, given: ResourceEnvelope) -> ResourceEnvelope:
    """`base` with the top-level fields `given` sets (pydantic's fields_set: what the caller
    wrote, not its defaults) put over it, validated whole (`ValidationFailed` naming the field,
    e.g. accelerator_types kept while the new gpus.max is 0). replan: `{}` changes nothing, and
    `{"wall_time": ...}` changes only the wall time; a field that is given replaces the task's
    whole field (gpus {"max": 4} is gpus 0..4)."""
    fields = given.model_fields_set
    if not fields:
        return base
    merged = base.model_dump(mode="json")
    merged.update(given.model_dump(mode="json", include=set(fields)))
    if "draft" not in fields:
        # The task's draft explained the task's bounds; these are the caller's now (the
        # provenance must not keep saying "heuristic" with a rationale for other numbers).
        merged["draft"] = None
    try:
        return parse_envelope(merged)
    except ValidationFailed as exc:
        # The clash may be with a field the caller never sent (kept from the task): say so.
        kept = sorted(
            f
            for f, v in base.model_dump(exclude_defaults=True).items()
            if f not in fields and f != "draft" and v
        )
        hint = exc.hint
        if kept:
            hint = (
                f"Checked with the task's own {', '.join(kept)} (kept: not given here); give "
                "the field too, or empty to clear it (e.g. sites_exclude: []). The task is "
                "unchanged."
            )
        raise ValidationFailed(exc.issues, hint=hint) from None


def _unit_issues(env: ResourceEnvelope, profiles: Sequence[SiteProfile]) -> list[FieldIssue]:
    issues: list[FieldIssue] = []
    nodes = [p.node.memory_mib for x in profiles for p in x.partitions if p.node.memory_mib]
    smallest = f"; the smallest node here has {min(nodes) // 1024} GiB" if nodes else ""
    for name, mib in (("memory.min", env.memory.min), ("memory.max", env.memory.max)):
        if mib and mib < _MIN_PLAUSIBLE_MIB:
            issues.append(
                FieldIssue(
                    name,
                    f"{mib} MiB looks like a unit slip (a bare number is MiB): write "
                    f"'{mib}G' if {mib} GiB was meant{smallest}",
                )
            )
    for name, sec in (("wall_time.min", env.wall_time.min), ("wall_time.max", env.wall_time.max)):
        if sec is not None and sec < _MIN_PLAUSIBLE_WALL_S:
            issues.append(
                FieldIssue(
                    name,
                    f"{sec} s is below the one-minute granularity of batch schedulers; "
                    f"write '{sec}h' or '{sec}m' if hours or minutes were meant",
                )
            )
    return issues


def _site_issues(
    env: ResourceEnvelope, sites: Collection[str], partitions: Mapping[str, Collection[str]]
) -> list[FieldIssue]:
    """Names of sites (and 'site/partition' preferences) no configured site has; `partitions`
    lists each site's partitions where its profile is known."""
    issues: list[FieldIssue] = []
    known = ", ".join(sorted(sites))
    for field in ("sites_include", "sites_exclude"):
        for i, name in enumerate(getattr(env, field)):
            if name not in sites:
                issues.append(FieldIssue(f"{field}[{i}]", f"unknown site {name!r}; known: {known}"))
    for i, name in enumerate(env.preferences.sites):
        where = f"preferences.sites[{i}]"
        if name not in sites:
            issues.append(FieldIssue(where, f"unknown site {name!r}; known: {known}"))
        elif name in env.sites_exclude or (env.sites_include and name not in env.sites_include):
            issues.append(FieldIssue(where, f"prefers {name!r}, which the envelope excludes"))
    for i, ref in enumerate(env.preferences.partitions):
        site, _, part = ref.partition("/")
        if not part:
            issues.append(
                FieldIssue(f"preferences.partitions[{i}]", f"{ref!r} is not 'site/partition'")
            )
        elif site not in sites:
            issues.append(FieldIssue(f"preferences.partitions[{i}]", f"unknown site {site!r}"))
        elif site in partitions and part not in partitions[site]:
            issues.append(
                FieldIssue(
                    f"preferences.partitions[{i}]",
                    f"{site} has no partition {part!r}; it has "
                    f"{', '.join(sorted(partitions[site]))}",
                )
            )
    return issues


def normalize_envelope(
    envelope: ResourceEnvelope,
    profiles: Iterable[SiteProfile] = (),
    *,
    sites: Collection[str] | None = None,
    partitions: Mapping[str, Collection[str]] | None = None,
) -> ResourceEnvelope:
    """The envelope with accelerator types lower-cased and de-duplicated, or `ValidationFailed`
    naming every offending field. `profiles` define the known accelerator types and `sites` the
    known site names, `partitions` each site's partitions (by profile name when not given); a
    check is skipped when nothing is known."""
    profiles = list(profiles)
    issues = _unit_issues(envelope, profiles)
    types: list[str] = []
    known = known_accelerator_types(profiles) if envelope.accelerator_types else frozenset()
    for i, raw in enumerate(envelope.accelerator_types):
        t = raw.strip().lower()
        if known and t not in known:
            issues.append(
                FieldIssue(
                    f"accelerator_types[{i}]",
                    f"unknown accelerator type {raw!r}; known: {', '.join(sorted(known))}",
                )
            )
        elif t not in types:
            types.append(t)
    if partitions is None:
        partitions = {p.name: {x.name for x in p.partitions} for p in profiles}
    if sites is not None:
        issues.extend(_site_issues(envelope, sites, partitions))
    elif profiles:
        issues.extend(_site_issues(envelope, set(partitions), partitions))
    if envelope.container is not None and not envelope.container.runtimes:
        issues.append(FieldIssue("container.runtimes", "empty; name at least one runtime"))
    if issues:
        raise ValidationFailed(issues)
    if tuple(types) == envelope.accelerator_types:
        return envelope
    return envelope.model_copy(update={"accelerator_types": tuple(types)})
