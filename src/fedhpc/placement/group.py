"""Place a group's children in one pass against one snapshot: the request-level work (pruning,
bounds, every partition's evaluation) is done once per distinct envelope, and each child sees
the earlier children's claims (capacity, queue position, credit) through a ledger; only the
partitions a claim changed are evaluated again. Each child's decision is the one `place` would
make with the same ledger."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from fedhpc.domain.envelope import ResourceEnvelope
from fedhpc.domain.units import as_utc
from fedhpc.placement.context import Ledger
from fedhpc.placement.estimators import (
    SchedulerKey,
    WaitHistory,
)
from fedhpc.placement.inputs import PlacementInputs
from fedhpc.placement.place import Request
from fedhpc.placement.policy import Policy
from fedhpc.placement.trace import Placement, Unschedulable

__all__ = ["STALE", "place_group"]

STALE = "asked before fedhpc placed a job on that partition"


def place_group(
    envelopes: Sequence[ResourceEnvelope],
    inputs: PlacementInputs,
    *,
    site_caps: Mapping[str, int] | None = None,
) -> list[Placement | Unschedulable]:
    """One decision per child, in order. Deterministic like `place`. A caller's `ledger` (claims
    the snapshot cannot show yet) is honoured and receives the children's claims. A scheduler
    estimate for a partition an earlier child took is stale (asked before that job): later
    children do without it, with the note `STALE` for its site. `site_caps`: how many children
    each named site may still take in this pass; a site at its cap is excluded for the later
    children (unless an envelope names it in sites_include)."""
    policy = inputs.policy or Policy()
    now = as_utc(inputs.now)
    history, estimates, estimate_notes = inputs.history, inputs.estimates, inputs.estimate_notes
    waits = (
        history
        if isinstance(history, WaitHistory)
        else (WaitHistory(history, now=now, settings=policy.settings) if history else None)
    )
    ledger = inputs.ledger if inputs.ledger is not None else Ledger()
    # Copies the children share and this pass edits: estimates dropped as partitions are taken.
    starts = dict(estimates) if estimates is not None else None
    asked = estimate_notes is not None or starts is not None
    notes = dict(estimate_notes or {}) if asked else None
    caps = dict(site_caps or {})
    full: frozenset[str] = frozenset(s for s, n in caps.items() if n <= 0)
    # By the identity of the caller's envelope object and the sites full so far.
    requests: dict[tuple[int, frozenset[str]], Request] = {}
    # Every child's inputs: the copies above (and the index, built once).
    shared = replace(
        inputs,
        policy=policy,
        now=now,
        history=waits or (),
        estimates=starts,
        estimate_notes=notes,
        ledger=ledger,
    )
    out: list[Placement | Unschedulable] = []
    for env in envelopes:
        req = requests.get((id(env), full))
        if req is None:
            req = requests[(id(env), full)] = Request(_without(env, full), shared)
        decision = req.decide()
        if isinstance(decision, Placement):
            site = decision.site
            ledger.claim(
                site,
                decision.partition,
                decision.account,
                decision.shape,
                decision.estimates.charge,
            )
            _drop_stale(starts, notes, site, decision.partition)
            for r in requests.values():
                r.claimed(site, decision.partition)
            if site in caps:
                caps[site] -= 1
                if caps[site] <= 0:
                    full = full | {site}
        out.append(decision)
    return out


def _without(env: ResourceEnvelope, full: frozenset[str]) -> ResourceEnvelope:
    """`env` with the full sites excluded too (never one it includes by name)."""
    drop = full - set(env.sites_exclude) - set(env.sites_include)
    if not drop:
        return env
    return env.model_copy(update={"sites_exclude": tuple(sorted({*env.sites_exclude, *drop}))})


def _drop_stale(
    starts: dict[SchedulerKey, datetime] | None,
    notes: dict[str, str] | None,
    site: str,
    partition: str,
) -> None:
    if not starts:
        return
    stale = [k for k in starts if k[0] == site and k[1] == partition]
    for k in stale:
        del starts[k]
    if stale and notes is not None:
        notes.setdefault(site, STALE)
