"""Pruning before scoring. A per-snapshot index of the federation's partitions, grouped by what
the request-independent rules read (architecture, accelerator, node CPUs and memory, wall-time
cap, nodes per job, container runtimes), so a request meets each class once; and lower bounds
on the best sort key a partition could reach, so partitions that cannot enter the ranking are
not scored. Everything pruned is reported by class, with the reason."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from fedhpc.domain.config import Site
from fedhpc.domain.envelope import ResourceEnvelope
from fedhpc.domain.job import Shape
from fedhpc.domain.site import PartitionSpec, PartitionState, ResourceSnapshot, SiteState
from fedhpc.placement.candidates import account_choices
from fedhpc.placement.context import Ledger, Live, PartitionContext
from fedhpc.placement.credit import Allowance, live_spec
from fedhpc.placement.policy import Objective, Policy, PolicyKind, Settings
from fedhpc.placement.ranking import primary_fields
from fedhpc.placement.rules import (
    RuleResult,
    accelerator,
    architecture,
    container,
    freshness,
    health,
    site_policy,
    too_large,
    wall_time,
)
from fedhpc.placement.trace import PrunedClass

__all__ = [
    "DOMINATED",
    "Entry",
    "FederationIndex",
    "federation_index",
    "live_of",
    "prune_static",
]

DOMINATED = "dominated"  # a pruned class's kind when bounds, not a rule, kept it out

# The request-independent partition rules a whole class shares, in the rule table's order.
_CLASS_RULES: tuple[Callable[[PartitionContext], RuleResult], ...] = (
    architecture,
    accelerator,
    wall_time,
    container,
)


@dataclass(frozen=True, slots=True)
class Entry:
    """One (site, partition) of the snapshot, in the order placement walks them."""

    site: Site
    spec: PartitionSpec
    state: SiteState | None
    pstate: PartitionState | None
    live: Live | None  # without any ledger's claims
    klass: int  # its feasibility class
    id: str  # "site/partition"
    key: tuple[str, str]  # (site, partition)
    health: RuleResult  # the health rule reads only the probe
    accounts: tuple[str | None, ...]  # the accounts placement tries here (None: none applies)


@dataclass(frozen=True, slots=True)
class FederationIndex:
    """Per snapshot: every partition, and the partitions of each feasibility class."""

    entries: tuple[Entry, ...]
    classes: tuple[tuple[int, ...], ...]
    by_name: Mapping[tuple[str, str], int]  # (site, partition) -> entry
    # The clock-free static pruning per kind of request (`prune_static`), filled as met.
    static: dict[
        tuple[object, ...],
        tuple[tuple[tuple[str, tuple[int, ...]], ...], tuple[PrunedClass, ...]],
    ] = field(default_factory=dict, compare=False)
    # Each (site, account)'s credit bounds from the probe and the settings, filled as met.
    allowances: dict[tuple[str, str | None], Allowance] = field(default_factory=dict, compare=False)

    @classmethod
    def build(cls, snapshot: ResourceSnapshot, sites: Mapping[str, Site]) -> FederationIndex:
        entries: list[Entry] = []
        keys: dict[tuple[object, ...], int] = {}
        members: list[list[int]] = []
        for name in sorted(sites):
            site = sites[name]
            state = snapshot.sites.get(name)
            pstates = {p.name: p for p in state.partitions} if state is not None else {}
            for stated in sorted(site.profile.partitions, key=lambda x: x.name):
                pstate = pstates.get(stated.name) or pstates.get(stated.scheduler_partition or "")
                # What the partition charges now: its live billing weights where they apply.
                spec = live_spec(site.profile, stated, pstate)
                live = Live.of(name, pstate, None) if pstate is not None else None
                key = _class_key(site, spec, state)
                k = keys.setdefault(key, len(keys))
                if k == len(members):
                    members.append([])
                members[k].append(len(entries))
                probe = PartitionContext(
                    cast(Any, None),
                    site,
                    spec,
                    state,
                    pstate,
                    live,
                    cast(Any, None),
                    cast(Any, None),
                    None,
                    None,
                )
                pid = f"{name}/{spec.name}"
                accounts = tuple(c.name for c in account_choices(site, spec, state)) or (None,)
                entries.append(
                    Entry(
                        site,
                        spec,
                        state,
                        pstate,
                        live,
                        k,
                        pid,
                        (site.name, spec.name),
                        health(probe),
                        accounts,
                    )
                )
        by_name = {e.key: i for i, e in enumerate(entries)}
        return cls(tuple(entries), tuple(tuple(m) for m in members), by_name)


def _class_key(site: Site, spec: PartitionSpec, state: SiteState | None) -> tuple[object, ...]:
    """Everything the class rules and the hardware part of the capacity rule read."""
    node, acc = spec.node, spec.node.accelerator
    arch = spec.arch or (state.arch if state and state.arch else None) or site.profile.arch
    return (
        arch,
        (acc.type, acc.gres_type, acc.count, acc.memory_gib) if acc else None,
        node.cpus,
        node.memory_mib,
        node.count,
        spec.max_nodes_per_job,
        spec.max_wall_s,
        spec.min_nodes_per_job,
        site.profile.containers.runtimes,
    )


# The last few indexes, with the objects their key names held alive (an id is never reused
# while its object lives). Keyed by the identity of each site and each site's probe, so a new
# snapshot object around the same probes (the daemon makes one per decision) hits.
_CACHE: list[tuple[tuple[object, ...], tuple[object, ...], FederationIndex]] = []
_CACHE_SIZE = 16
_CACHE_LOCK = threading.Lock()


def federation_index(snapshot: ResourceSnapshot, sites: Mapping[str, Site]) -> FederationIndex:
    """The index of this snapshot's federation, built once per distinct set of probes."""
    names = sorted(sites)
    states = tuple(snapshot.sites.get(n) for n in names)
    objs = tuple(sites[n] for n in names)
    key = (tuple(names), tuple(map(id, objs)), tuple(map(id, states)))
    with _CACHE_LOCK:  # the daemon places from worker threads
        for i, (k, _, index) in enumerate(_CACHE):
            if k == key:
                _CACHE.insert(0, _CACHE.pop(i))
                return index
    index = FederationIndex.build(snapshot, sites)
    with _CACHE_LOCK:
        _CACHE.insert(0, (key, (objs, states), index))
        del _CACHE[_CACHE_SIZE:]
    return index


def live_of(e: Entry, ledger: Ledger | None) -> Live | None:
    """The partition's live state with the ledger's claims taken off."""
    if (
        ledger is not None
        and e.pstate is not None
        and ledger.jobs.get((e.site.name, e.pstate.name))
    ):
        return Live.of(e.site.name, e.pstate, ledger)
    return e.live


def context(
    e: Entry,
    *,
    env: ResourceEnvelope,
    now: datetime,
    settings: Settings,
    ledger: Ledger | None,
    task_budget: float | None,
    fixed: str | None,
    refused: Mapping[str, str] | None = None,
    suspect: Mapping[str, str] | None = None,
) -> PartitionContext:
    live = e.live
    if (
        ledger is not None
        and e.pstate is not None
        and ledger.jobs.get((e.site.name, e.pstate.name))
    ):
        live = Live.of(e.site.name, e.pstate, ledger)
    name = e.site.name
    return PartitionContext(
        env,
        e.site,
        e.spec,
        e.state,
        e.pstate,
        live,
        now,
        settings,
        ledger,
        task_budget,
        fixed,
        refused=refused.get(name) if refused else None,
        suspect=suspect.get(name) if suspect else None,
    )


class _Classes:
    """Pruned partitions grouped by (rule, reason with the partition's own name taken out)."""

    def __init__(self) -> None:
        self.groups: dict[tuple[str, str], list[str]] = {}
        self._keys: dict[tuple[int, str], tuple[str, str]] = {}

    def add(self, e: Entry, v: RuleResult, named: str) -> None:
        """`named`: the partition the reason names (the class's example), if any."""
        key = self._keys.get((id(v), named))
        if key is None:
            reason = v.reason.replace(named, "{partition}") if named else v.reason
            key = self._keys[(id(v), named)] = (v.category.value, reason)
        self.groups.setdefault(key, []).append(e.id)

    def result(self) -> list[PrunedClass]:
        return [PrunedClass(k, r, tuple(ids)) for (k, r), ids in self.groups.items()]


def prune_static(
    index: FederationIndex,
    make: Callable[[Entry], PartitionContext],
    minimum: Shape,
) -> tuple[list[int], list[PrunedClass]]:
    """Partitions that fail a rule whatever the shape and whatever the estimates: the site
    policy, the class rules, hardware too small for the envelope's minimum, health and
    freshness. Each rule runs once per site or class, not per partition, and all but freshness
    (which reads the clock) once per snapshot and kind of request. Returns (survivors, pruned
    classes)."""
    p = make(index.entries[0]) if index.entries else None
    key = _static_key(p, minimum) if p is not None else ()
    hit = index.static.get(key)
    if hit is None:
        if len(index.static) >= _STATIC_KEEP:
            index.static.clear()
        hit = index.static[key] = _prune_request(index, make, minimum)
    by_site, pruned = hit
    survivors: list[int] = []
    stale = _Classes()
    for _, members in by_site:
        v = freshness(make(index.entries[members[0]]))
        if v.failed:
            for i in members:
                stale.add(index.entries[i], v, "")
        else:
            survivors.extend(members)
    return survivors, [*pruned, *stale.result()]


_STATIC_KEEP = 64  # kinds of request remembered per snapshot


def _static_key(p: PartitionContext, minimum: Shape) -> tuple[object, ...]:
    """Everything of the request the rules `_prune_request` applies read."""
    env = p.envelope
    return (
        env.sites_include,
        env.sites_exclude,
        env.architectures,
        env.gpus.min,
        env.gpus.upper,
        env.accelerator_types,
        env.min_accelerator_memory_gib,
        env.wall_time.min,
        env.container.runtimes if env.container is not None else None,
        minimum.nodes,
        minimum.cpus,
        minimum.gpus,
        minimum.memory_mib,
        p.fixed_site,
        p.settings.allow_cpu_on_gpu_partitions,
    )


def _prune_request(
    index: FederationIndex, make: Callable[[Entry], PartitionContext], minimum: Shape
) -> tuple[tuple[tuple[str, tuple[int, ...]], ...], tuple[PrunedClass, ...]]:
    """The clock-free part of `prune_static`: survivors per site, and the pruned classes."""
    per_site: dict[str, RuleResult] = {}
    failing: dict[int, tuple[RuleResult | None, str]] = {}
    classes = _Classes()
    by_site: dict[str, list[int]] = {}
    for i, e in enumerate(index.entries):
        name = e.site.name
        named = ""
        if e.spec.name in e.site.profile.blocked_partitions:
            v, named = site_policy(make(e)), e.id
        else:
            v = per_site.get(name) or per_site.setdefault(name, site_policy(make(e)))
        if not v.failed:
            if e.klass not in failing:
                failing[e.klass] = (_class_failure(make(e), minimum), e.id)
            bad, example = failing[e.klass]
            if bad is not None:
                v, named = bad, example
        if not v.failed:
            v = e.health
        if v.failed:
            classes.add(e, v, named)
        else:
            by_site.setdefault(name, []).append(i)
    return tuple((k, tuple(v)) for k, v in by_site.items()), tuple(classes.result())


def _class_failure(p: PartitionContext, minimum: Shape) -> RuleResult | None:
    for fn in _CLASS_RULES:
        v = fn(p)
        if v.failed:
            return v
    return too_large(p, minimum)


def dominated(
    ids: Iterable[str], threshold: tuple[float | int | str, ...], policy: Policy
) -> PrunedClass:
    """The class of partitions left unscored: a lower bound on their best key is worse than the
    last ranked candidate's key `threshold`."""
    primary = threshold[len(primary_fields(policy)) - 1]
    if policy.kind is PolicyKind.SHORTEST_QUEUE:
        why = f"queue deeper than the ranked candidates' (at most {primary} pending)"
    else:
        what = "p90 completion" if policy.objective is Objective.P90 else "completion"
        why = (
            f"cannot rank: the earliest possible {what} here (a lower bound on wait + runtime "
            f"+ environment; ties then by credit fraction and preference) comes after the "
            f"ranked candidates' ({primary} s at most)"
        )
    return PrunedClass(DOMINATED, why, tuple(ids))
