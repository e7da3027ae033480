"""`inspect_federation`: the normalized snapshot with freshness per site, optionally filtered."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from fedhpc.domain.accelerators import GPU_MEMORY_GIB
from fedhpc.domain.config import Site
from fedhpc.domain.envelope import Arch
from fedhpc.domain.site import Credit, Health, SiteState
from fedhpc.domain.units import as_utc
from fedhpc.errors import FieldIssue, ValidationFailed
from fedhpc.ops.sitecheck import SiteName, SiteNotUsable

__all__ = [
    "FEDERATION_COLUMNS",
    "FederationView",
    "InspectRequest",
    "PartitionView",
    "SiteView",
    "UnknownAccelerator",
    "federation_rows",
    "inspect_federation",
    "stale_after_s",
    "with_planner_view",
]


class UnknownAccelerator(ValidationFailed):
    """The accelerator filter names no type fedhpc knows (a typo such as 'a1000')."""

    code = "unknown_accelerator"


class InspectRequest(BaseModel):
    """Filters for `inspect_federation`; every one is optional."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    sites: tuple[SiteName, ...] = Field(
        default=(), max_length=64, description="only these sites; empty = all"
    )
    accelerator: str | None = Field(
        default=None,
        max_length=64,
        description="only partitions with this accelerator type, e.g. 'a100'",
    )
    arch: Arch | None = Field(default=None, description="only partitions of this architecture")
    include_blocked: bool = Field(default=False, description="also list blocked partitions")


class PartitionView(BaseModel):
    """One partition: static shape from the profile, live numbers from the last probe."""

    model_config = ConfigDict(frozen=True)

    name: str
    arch: Arch
    accelerator: str | None
    accelerator_memory_gib: float | None
    gpus_per_node: int
    cpus_per_node: int
    memory_mib_per_node: int
    max_wall_s: int
    max_nodes_per_job: int
    blocked: bool
    available: bool
    nodes_usable: int
    nodes_total: int
    free_gpus: int
    total_gpus: int
    free_cpus: int
    total_cpus: int
    max_free_gpus_on_node: int
    pending_jobs: int
    blocked_pending_jobs: int = 0  # of pending_jobs, those that cannot start (dependencies, holds)
    running_jobs: int
    user_pending_jobs: int
    user_running_jobs: int


class SiteView(BaseModel):
    """One site as placement sees it: health, freshness, accounts, credit, partitions."""

    model_config = ConfigDict(frozen=True)

    # Required: what names a site and says whether to trust it. The rest has an "empty"
    # default, so an agent's `fields` projection (inspect_federation) can leave it out.
    site: str
    health: Health
    stale: bool = Field(description="the last probe is older than the site's staleness bound")
    title: str = ""
    dialect: str = ""
    collected_at: datetime | None = None
    age_s: float | None = None
    error: str | None = None
    accounts: tuple[str, ...] = ()
    credit: tuple[Credit, ...] = ()
    partitions: tuple[PartitionView, ...] = ()
    # Per partition and wait estimator: how its forecasts held here (the rows of
    # /v1/estimators: coverage of the p10-p90 band, bias, error, weight; placement.calibration).
    calibration: tuple[dict[str, Any], ...] = ()
    # Its controller just missed an observation's ping (a hung or overloaded scheduler, not yet
    # offline): why; new work avoids it while another site fits (orchestrator.suspect_sites).
    suspect: str | None = None


class FederationView(BaseModel):
    """The answer of `inspect_federation`."""

    model_config = ConfigDict(frozen=True)

    taken_at: datetime
    sites: tuple[SiteView, ...]


FEDERATION_COLUMNS = (
    "SITE",
    "PARTITION",
    "ARCH",
    "ACCEL",
    "GPUS FREE/TOTAL",
    "CPUS FREE/TOTAL",
    "PENDING",
    "RUNNING",
    "FRESH",
    "HEALTH",
)


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.0f}m"


def federation_rows(view: FederationView) -> list[tuple[SiteView, tuple[str, ...]]]:
    """`fedhpc status`'s cells, one row per partition (a site without partitions: one row of
    dashes), under `FEDERATION_COLUMNS`; each row with its site, for the renderers' styles."""
    rows: list[tuple[SiteView, tuple[str, ...]]] = []
    for s in view.sites:
        health = (
            s.health.value + (" (stale)" if s.stale else "") + (" suspect" if s.suspect else "")
        )
        if not s.partitions:
            rows.append((s, (s.site, "-", "-", "-", "-", "-", "-", "-", _age(s.age_s), health)))
        for p in s.partitions:
            cells = (
                s.site,
                p.name,
                p.arch.value,
                p.accelerator or "-",
                f"{p.free_gpus}/{p.total_gpus}",
                f"{p.free_cpus}/{p.total_cpus}",
                str(p.pending_jobs),
                str(p.running_jobs),
                _age(s.age_s),
                health,
            )
            rows.append((s, cells))
    return rows


def with_planner_view(
    view: FederationView, rows: list[dict[str, Any]], suspects: Mapping[str, str] | None = None
) -> FederationView:
    """The view with what the planner adds to the probes: each site's estimator rows
    (`/v1/estimators`) under `calibration`, and why a site is suspect now (`suspects`) under
    `suspect`."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(str(r["site"]), []).append({k: v for k, v in r.items() if k != "site"})
    doubt = suspects or {}
    sites = tuple(
        s.model_copy(
            update={"calibration": tuple(by.get(s.site, ())), "suspect": doubt.get(s.site)}
        )
        for s in view.sites
    )
    return view.model_copy(update={"sites": sites})


def stale_after_s(site: Site, refresh_s: float) -> float:
    """A probe is stale after three refresh periods (the site's own minimum applies)."""
    return 3 * max(refresh_s, float(site.profile.min_refresh_s))


def _partitions(site: Site, state: SiteState | None, req: InspectRequest) -> list[PartitionView]:
    out = []
    for spec in site.profile.partitions:
        acc = spec.node.accelerator
        arch = site.profile.arch_of(spec.name)
        blocked = spec.name in site.profile.blocked_partitions
        if blocked and not req.include_blocked:
            continue
        if req.accelerator and (acc is None or acc.type != req.accelerator.strip().lower()):
            continue
        if req.arch and arch != req.arch:
            continue
        live = state.partition(spec.name) if state else None
        out.append(
            PartitionView(
                name=spec.name,
                arch=arch,
                accelerator=acc.type if acc else None,
                accelerator_memory_gib=acc.memory_gib if acc else None,
                gpus_per_node=acc.count if acc else 0,
                cpus_per_node=spec.node.cpus,
                memory_mib_per_node=spec.node.memory_mib,
                max_wall_s=spec.max_wall_s,
                max_nodes_per_job=spec.max_nodes_per_job,
                blocked=blocked,
                available=bool(live and live.available),
                nodes_usable=live.nodes.usable if live else 0,
                nodes_total=live.nodes.total if live else 0,
                free_gpus=live.free_gpus if live else 0,
                total_gpus=live.total_gpus if live else 0,
                free_cpus=live.free_cpus if live else 0,
                total_cpus=live.total_cpus if live else 0,
                max_free_gpus_on_node=live.max_free_gpus_on_node if live else 0,
                pending_jobs=live.pending_jobs if live else 0,
                blocked_pending_jobs=live.blocked_pending_jobs if live else 0,
                running_jobs=live.running_jobs if live else 0,
                user_pending_jobs=live.user_pending_jobs if live else 0,
                user_running_jobs=live.user_running_jobs if live else 0,
            )
        )
    return out


def _check_accelerator(accelerator: str, sites: Mapping[str, Site]) -> None:
    """A type neither an enabled site nor the catalogue of known models has is refused: its
    empty answer would read as "none free". A known model no enabled site offers stays an
    empty answer: that is true (no site here has one), and the name is not a typo."""
    offered = {
        p.node.accelerator.type
        for site in sites.values()
        for p in site.profile.partitions
        if p.node.accelerator is not None
    }
    wanted = accelerator.strip().lower()
    if wanted in offered or wanted in GPU_MEMORY_GIB:
        return
    here = ", ".join(sorted(offered)) or "none"
    others = ", ".join(sorted(set(GPU_MEMORY_GIB) - offered))
    raise UnknownAccelerator(
        [FieldIssue("accelerator", f"no accelerator type is called {accelerator!r}")],
        hint=f"The enabled sites offer: {here}. Other known types: {others}. "
        "Name one of them, or drop accelerator.",
    )


def inspect_federation(
    states: Mapping[str, SiteState],
    sites: Mapping[str, Site],
    *,
    now: datetime,
    refresh_s: float,
    request: InspectRequest | None = None,
) -> FederationView:
    """Join the latest site states with the profiles. Pure: `now` is an argument."""
    req = request or InspectRequest()
    unknown = [
        FieldIssue(f"sites[{i}]", f"no site is called {name!r}")
        for i, name in enumerate(req.sites)
        if name not in sites
    ]
    if unknown:  # an empty answer would read as "no such capacity", not as a typo
        known = ", ".join(sorted(sites)) or "none"
        raise SiteNotUsable(unknown, hint=f"Sites: {known}. Name one of them, or drop sites.")
    if req.accelerator:
        _check_accelerator(req.accelerator, sites)
    views = []
    for name in sorted(sites):
        if req.sites and name not in req.sites:
            continue
        site, state = sites[name], states.get(name)
        parts = _partitions(site, state, req)
        if (req.accelerator or req.arch) and not parts:
            continue
        age = (as_utc(now) - as_utc(state.collected_at)).total_seconds() if state else None
        views.append(
            SiteView(
                site=name,
                title=site.profile.title,
                dialect=site.profile.dialect,
                health=state.health if state else Health.OFFLINE,
                stale=age is None or age > stale_after_s(site, refresh_s),
                collected_at=state.collected_at if state else None,
                age_s=round(age, 3) if age is not None else None,
                error=(state.error if state else "never probed"),
                accounts=state.accounts if state else (),
                credit=state.credit if state else (),
                partitions=tuple(parts),
            )
        )
    return FederationView(taken_at=now, sites=tuple(views))
