"""Pruned placement against the full evaluation (`prune=False`) on randomized federations: the
same decision, the same best-ranked candidates, every partition accounted for (scored or pruned
by class with its reason); a group placed in one pass decides as `place` per child would with
the earlier children's claims; and the reasons pruned classes report."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedhpc.domain import (
    Arch,
    ChargeKind,
    ChargeModel,
    ContainerSupport,
    Credit,
    Health,
    ResourceEnvelope,
    ResourceSnapshot,
)
from fedhpc.domain.config import Site
from fedhpc.placement import (
    ErrorObservation,
    EstimatorErrors,
    Ledger,
    Objective,
    Placement,
    PlacementInputs,
    Policy,
    PolicyKind,
    RuntimeDeclaration,
    Unschedulable,
    WaitHistory,
    WaitMethod,
    WaitObservation,
    known_accelerator_types,
    place,
    place_group,
    shape_key,
)
from fedhpc.placement.estimators import SchedulerKey
from fedhpc.placement.group import STALE
from fedhpc.placement.prune import DOMINATED
from fedhpc.placement.ranking import Ranked, sort_key, with_credit_fraction
from fedhpc.placement.trace import Estimates
from tests.unit.test_placement_world import (
    NOW,
    cpu_partition,
    env,
    gpu_partition,
    profile,
    site,
    snapshot,
    state,
)

_ACCS = (("a100", 40.0), ("a100", 80.0), ("h100", 80.0), ("mi250", 64.0))
_CHARGES = (
    ChargeModel(kind=ChargeKind.GPU_HOURS),
    ChargeModel(kind=ChargeKind.CORE_HOURS, rate=0.5),
    ChargeModel(kind=ChargeKind.NODE_HOURS, whole_node=True),
)


def _world(rng: random.Random) -> tuple[dict[str, Site], ResourceSnapshot]:
    sites: dict[str, Site] = {}
    states = []
    for k in range(rng.randint(1, 7)):
        parts = []
        for j in range(rng.randint(1, 6)):
            kw: dict[str, Any] = {
                "max_wall_s": rng.choice([3600, 4 * 3600, 48 * 3600]),
                "max_nodes_per_job": rng.choice([1, 2, 4]),
            }
            if rng.random() < 0.2:
                kw["max_jobs_per_user"] = rng.randint(1, 3)
            if rng.random() < 0.6:
                acc, mem = rng.choice(_ACCS)
                part = gpu_partition(
                    f"p{j}",
                    acc,
                    per_node=rng.choice([1, 2, 4, 8]),
                    memory_gib=mem,
                    count=rng.randint(1, 4),
                    cpus=rng.choice([16, 64]),
                    **kw,
                )
            else:
                part = cpu_partition(
                    f"p{j}", cpus=rng.choice([32, 128]), count=rng.randint(1, 4), **kw
                )
            parts.append(part)
        name = f"s{k}"
        blocked = (parts[0].name,) if rng.random() < 0.1 else ()
        prof = profile(
            name,
            *parts,
            arch=rng.choice([Arch.X86_64, Arch.X86_64, Arch.AARCH64]),
            charge=rng.choice(_CHARGES),
            blocked_partitions=blocked,
            containers=ContainerSupport(runtimes=rng.choice([("apptainer",), ()])),
        )
        budget = rng.choice([None, None, 20.0, 400.0, 1e5])
        sites[name] = site(prof, budget=budget)
        per: dict[str, Any] = {}
        for spec in parts:
            node = spec.node
            per_node = node.accelerator.count if node.accelerator else 0
            free_g = rng.randint(0, per_node * node.count)
            free_c = rng.randint(0, node.cpus * node.count)
            per[spec.name] = {
                "free_gpus": free_g,
                "max_free_gpus_on_node": min(per_node, free_g),
                "free_cpus": free_c,
                "max_free_cpus_on_node": min(node.cpus, free_c),
                "pending_jobs": rng.choice([0, 0, 1, 3, 40]),
                "user_pending_jobs": rng.choice([0, 0, 1, 2]),
                "available": rng.random() > 0.05,
            }
        credit = (Credit(account="proj", used=rng.uniform(0, 300), balance=rng.uniform(0, 1e4)),)
        states.append(
            state(
                prof,
                age_s=rng.choice([5, 5, 5, 30, 900]),
                health=rng.choices([Health.OK, Health.DEGRADED, Health.OFFLINE], [8, 1, 1])[0],
                credit=credit if rng.random() < 0.7 else (),
                **per,
            )
        )
    return sites, snapshot(*states)


def _envelope(rng: random.Random, sites: dict[str, Site]) -> ResourceEnvelope:
    names = sorted(sites)
    types = sorted(known_accelerator_types(s.profile for s in sites.values()))
    base: dict[str, Any] = rng.choice(
        [
            {"cpus": (4, 64), "wall_time": ("1h", "2h")},
            {"gpus": 1, "cpus": (2, 8), "wall_time": ("30m", "1h")},
            {"gpus": (1, 4), "cpus": (8, 32), "memory": ("32G", "128G"), "wall_time": "2h"},
            {"gpus": 4, "nodes": (1, 2), "wall_time": ("1h", "2h")},
            {"gpus": 1, "min_accelerator_memory_gib": 70},
            {"gpus": (0, 2), "cpus": (1, 16)},
            {"gpus": (1, 8), "wall_time": ("5h", "6h")},
            {"cpus": 8, "container": {"image": "docker://x", "runtimes": ["apptainer"]}},
        ]
    )
    if "gpus" in base and types and rng.random() < 0.3:
        base["accelerator_types"] = tuple(rng.sample(types, rng.randint(1, len(types))))
    allowed = list(names)
    if rng.random() < 0.2:
        base["sites_exclude"] = tuple(rng.sample(names, 1))
        allowed = [n for n in names if n not in base["sites_exclude"]]
    elif rng.random() < 0.1:
        base["sites_include"] = tuple(rng.sample(names, 1))
        allowed = list(base["sites_include"])
    if allowed and rng.random() < 0.2:
        base["preferences"] = {"sites": rng.sample(allowed, min(2, len(allowed)))}
    if rng.random() < 0.1:
        base["architectures"] = ("x86_64",)
    return env(**base)


def _policy(rng: random.Random, names: list[str]) -> Policy:
    kind = rng.choice(list(PolicyKind))
    return Policy(
        kind=kind,
        site=rng.choice(names) if kind is PolicyKind.FIXED_SITE else None,
        fallback=rng.random() < 0.7,
        objective=rng.choice(list(Objective)),
        wait=rng.choice(list(WaitMethod)),
        joint_sizing=rng.random() < 0.8,
    )


def _history(rng: random.Random, sites: dict[str, Site]) -> WaitHistory | None:
    if rng.random() < 0.3:
        return None
    obs = [
        WaitObservation(
            site=name,
            partition=spec.name,
            gpus=rng.choice([0, 1, 2, 4]),
            cpus=rng.choice([1, 8, 32]),
            nodes=rng.choice([1, 1, 2]),
            wait_s=rng.choice([0.0, rng.expovariate(1 / 600)]),
            observed_at=NOW - timedelta(hours=rng.uniform(0, 100)),
        )
        for name, s in sites.items()
        for spec in s.profile.partitions
        for _ in range(rng.choice([0, 1, 3, 6]))
    ]
    return WaitHistory(obs, now=NOW, settings=Policy().settings)


def _errors(rng: random.Random, sites: dict[str, Site]) -> EstimatorErrors:
    """Recent estimator errors: on some partitions paper has been better than learned."""
    obs = [
        ErrorObservation(
            name,
            spec.name,
            method,
            rng.uniform(0, 900),
            rng.uniform(0, 900),
            NOW - timedelta(hours=1),
        )
        for name, s in sites.items()
        for spec in s.profile.partitions
        for method in ("learned", "paper")
        for _ in range(rng.choice([0, 3]))
    ]
    return EstimatorErrors(obs, now=NOW, window_s=14 * 86400.0)


def _key(d: Placement | Unschedulable) -> object:
    if isinstance(d, Unschedulable):
        return ("unschedulable", d.hint, d.reasons)
    return (d.candidate_id, d.shape, d.estimates, d.account, d.qos)


def _check(pruned: Placement | Unschedulable, full: Placement | Unschedulable, top: int) -> None:
    assert _key(pruned) == _key(full)
    if isinstance(full, Unschedulable):  # nothing pruned: the very same trace
        assert pruned.trace == full.trace
        return
    ranked = [c for c in pruned.trace.candidates if c.feasible]
    everything = [c for c in full.trace.candidates if c.feasible]
    assert ranked[:top] == everything[:top]  # the best `top` exactly as a full evaluation
    assert ranked == sorted(ranked, key=lambda c: c.key or ())
    # Every partition is accounted for: scored, or pruned in exactly one class.
    scored = {f"{c.site}/{c.partition}" for c in pruned.trace.candidates}
    classes = [p for c in pruned.trace.pruned for p in c.partitions]
    assert len(classes) == len(set(classes))
    every = {f"{c.site}/{c.partition}" for c in full.trace.candidates}
    assert scored | set(classes) == every and not scored & set(classes)
    # A class named after a rule: every listed partition fails that rule in the full trace.
    by_part: dict[str, set[str]] = {}
    for c in full.trace.candidates:
        by_part.setdefault(f"{c.site}/{c.partition}", set()).update(
            r.category.value for r in c.rules if r.failed
        )
    for cls in pruned.trace.pruned:
        assert cls.reason and cls.partitions
        if cls.kind == DOMINATED:
            assert len(ranked) >= top  # only a full ranking can dominate anyone
            continue
        for p in cls.partitions:
            assert cls.kind in by_part[p], (cls, p, by_part[p])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_pruned_placement_decides_like_the_full_evaluation(seed: int) -> None:
    rng = random.Random(seed)
    sites, snap = _world(rng)
    names = sorted(sites)
    envelope, policy = _envelope(rng, sites), _policy(rng, names)
    history = _history(rng, sites)
    runtime = (
        RuntimeDeclaration(seconds=rng.choice([600, 3600, 4 * 3600]), gpus=1, cpus=4)
        if rng.random() < 0.3
        else None
    )
    kw: dict[str, Any] = {"now": NOW, "history": history or (), "runtime": runtime}
    if rng.random() < 0.4:
        kw["errors"] = _errors(rng, sites)
    first = place(envelope, PlacementInputs(snap, sites, policy, prune=False, **kw))
    if isinstance(first, Placement) and rng.random() < 0.5:
        # Scheduler estimates for some of the candidates (later or sooner than predicted).
        kw["estimates"] = {
            (c.site, c.partition, c.account, c.qos, shape_key(c.shape)): NOW
            + timedelta(minutes=rng.randint(0, 600))
            for c in first.trace.candidates
            if c.feasible and rng.random() < 0.4
        }
    top = rng.choice([1, 3, 8])
    full = place(envelope, PlacementInputs(snap, sites, policy, prune=False, **kw))
    assert not full.trace.pruned
    _check(place(envelope, PlacementInputs(snap, sites, policy, top=top, **kw)), full, top)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_a_group_in_one_pass_decides_as_place_per_child_with_earlier_claims(seed: int) -> None:
    """Each child's decision, and the ranked part of its trace (every rule's reason, every
    estimate, every sort key), is the one a full `place` makes with the earlier children's
    claims, and with the scheduler estimates their jobs made stale dropped."""
    rng = random.Random(seed)
    sites, snap = _world(rng)
    names = sorted(sites)
    kinds = [_envelope(rng, sites) for _ in range(rng.randint(1, 2))]
    kids = [rng.choice(kinds) for _ in range(rng.randint(1, 25))]
    policy, history = _policy(rng, names), _history(rng, sites)
    budget = rng.choice([None, 5.0, 50.0])
    kw: dict[str, Any] = {"now": NOW, "task_budget": budget}
    if rng.random() < 0.3:
        kw["errors"] = _errors(rng, sites)
    starts: dict[SchedulerKey, datetime] | None = None
    notes: dict[str, str] | None = None
    first = place(kids[0], PlacementInputs(snap, sites, policy, prune=False, **kw))
    if isinstance(first, Placement) and rng.random() < 0.4:
        starts = {
            (c.site, c.partition, c.account, c.qos, shape_key(c.shape)): NOW
            + timedelta(minutes=rng.randint(0, 600))
            for c in first.trace.candidates
            if c.feasible and rng.random() < 0.5
        }
        notes = {}
    one_pass = place_group(
        kids,
        PlacementInputs(snap, sites, policy, history=history or (), estimates=starts, **kw),
    )
    ledger = Ledger()
    for kid, got in zip(kids, one_pass, strict=True):
        want = place(
            kid,
            PlacementInputs(
                snap,
                sites,
                policy,
                history=history or (),
                ledger=ledger,
                prune=False,
                estimates=None if starts is None else dict(starts),
                estimate_notes=None if notes is None else dict(notes),
                **kw,
            ),
        )
        assert _key(got) == _key(want)
        if isinstance(want, Placement):
            assert isinstance(got, Placement)  # the same outcome as `want`, by the line above
            ranked = [c for c in got.trace.candidates if c.feasible]
            everything = [c for c in want.trace.candidates if c.feasible]
            assert ranked[: _ranked_exactly(got)] == everything[: _ranked_exactly(got)]
            # Why each site had no scheduler estimates (the count covers the ranked ones only).
            assert (
                got.trace.estimates_note.split("; ")[1:]
                == want.trace.estimates_note.split("; ")[1:]
            )
            ledger.claim(want.site, want.partition, want.account, want.shape, want.estimates.charge)
            if starts is not None and notes is not None:
                taken = [k for k in starts if k[:2] == (want.site, want.partition)]
                for k in taken:
                    del starts[k]
                if taken:
                    notes.setdefault(want.site, STALE)
        else:
            assert got.trace == want.trace  # nothing fits: every partition, as `place` does
    assert [
        _key(d) for d in place_group(kids, PlacementInputs(snap, sites, policy, prune=False, **kw))
    ] == [_key(d) for d in place_group(kids, PlacementInputs(snap, sites, policy, **kw))]


def _ranked_exactly(d: Placement) -> int:
    """How many candidates a pruned trace ranks exactly as a full one (all, when none pruned)."""
    return d.trace.ranked or len(d.trace.candidates)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(list(PolicyKind)),
    st.sampled_from(list(Objective)),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(allow_nan=True, allow_infinity=True),
)
def test_a_sort_key_with_another_credit_fraction_is_the_key_of_those_estimates(
    kind: PolicyKind, objective: Objective, before: float, after: float
) -> None:
    """A group child's budget-only change patches the key in place (`with_credit_fraction`):
    it must be the key `sort_key` would make."""
    policy = Policy(kind=kind, site="a" if kind is PolicyKind.FIXED_SITE else None)
    policy = policy.model_copy(update={"objective": objective})
    ranked = Ranked(id="a/g/proj/x", site="a", partition="g", account_rank=1, queue_depth=3)
    est = Estimates(
        wait_s=10.0,
        wait_p90_s=20.0,
        wait_source="paper",
        runtime_s=600.0,
        runtime_source="envelope",
        env_s=0.0,
        env_source="none",
        completion_s=610.0,
        completion_p90_s=620.0,
        charge=4.0,
        charge_unit="SU",
        credit_fraction=before,
        waste=0,
    )
    prefs = env(gpus=1).preferences
    patched = with_credit_fraction(sort_key(policy, ranked, est, prefs), after)
    want = sort_key(policy, ranked, replace(est, credit_fraction=after), prefs)
    assert patched == want  # a NaN or infinite fraction sorts as infinite in both


def test_capacity_an_earlier_child_took_is_not_offered_to_the_next() -> None:
    """Two free 4-GPU nodes at `a`, a queue at `b`: children 1-2 fill `a`, child 3 goes to
    `b`, and the caller's ledger holds all three claims afterwards."""
    a = profile("a", gpu_partition("g", count=2))
    b = profile("b", gpu_partition("g", count=2))
    sites = {"a": site(a), "b": site(b)}
    snap = snapshot(state(a), state(b, g={"pending_jobs": 3}))
    kid = env(gpus=4, cpus=8, wall_time="1h")
    ledger = Ledger()
    out = place_group([kid] * 3, PlacementInputs(snap, sites, now=NOW, ledger=ledger))
    assert [d.site for d in out if isinstance(d, Placement)] == ["a", "a", "b"]
    assert ledger.jobs == {("a", "g"): 2, ("b", "g"): 1}
    assert ledger.gpus[("a", "g")] == 8


def test_pruned_partitions_are_reported_by_class_with_the_reason() -> None:
    gpu = profile("gpus", *(gpu_partition(f"g{i}", count=1) for i in range(3)))
    small = profile("small", cpu_partition("c", cpus=8))
    big = profile("big", cpu_partition("c", cpus=128), cpu_partition("short", max_wall_s=600))
    sites = {"gpus": site(gpu), "small": site(small), "big": site(big)}
    snap = snapshot(state(gpu), state(small), state(big))
    decision = place(env(cpus=32, wall_time="1h"), PlacementInputs(snap, sites, now=NOW))
    assert isinstance(decision, Placement) and decision.candidate_id.startswith("big/c/")
    classes = {c.kind: c for c in decision.trace.pruned}
    assert classes["accelerator"].partitions == ("gpus/g0", "gpus/g1", "gpus/g2")
    assert classes["accelerator"].reason == (
        "{partition} is a a100 partition; a CPU-only task stays off it"
    )
    assert classes["capacity"].partitions == ("small/c",)
    assert classes["capacity"].reason == "needs 32 CPUs per node; a {partition} node has 8"
    assert classes["wall_time"].partitions == ("big/short",)
    assert decision.trace.pruned_partitions() == 5
    assert decision.trace.site_reasons("small") == ["needs 32 CPUs per node; a small/c node has 8"]
    # Nothing fits: every partition is evaluated and explained, as without pruning.
    none = place(env(cpus=256), PlacementInputs(snap, sites, now=NOW))
    assert isinstance(none, Unschedulable) and not none.trace.pruned
    assert len(none.trace.candidates) == 6


def test_partitions_that_cannot_rank_are_reported_as_dominated() -> None:
    """Ten equal partitions, nine with deep queues: with top=1 only the free one is scored
    beyond what ties require; the others are one class, saying why."""
    parts = [gpu_partition(f"g{i}", count=1) for i in range(10)]
    p = profile("p", *parts)
    busy: dict[str, Any] = {
        f"g{i}": {"free_gpus": 0, "max_free_gpus_on_node": 0, "pending_jobs": 50 + i}
        for i in range(1, 10)
    }
    sites, snap = {"p": site(p)}, snapshot(state(p, **busy))
    one = env(gpus=1, wall_time="1h")
    decision = place(
        one, PlacementInputs(snap, sites, Policy(wait=WaitMethod.PAPER), now=NOW, top=1)
    )
    assert isinstance(decision, Placement) and decision.partition == "g0"
    assert [c.partition for c in decision.trace.candidates] == ["g0"]
    (dom,) = decision.trace.pruned
    assert dom.kind == DOMINATED and len(dom.partitions) == 9
    assert "earliest possible completion" in dom.reason
    assert decision.trace.ranked == 1
    # A caller comparing against where a job already waits gets that partition scored.
    kept = place(
        one,
        PlacementInputs(
            snap, sites, Policy(wait=WaitMethod.PAPER), now=NOW, top=1, score=[("p", "g5")]
        ),
    )
    assert isinstance(kept, Placement)
    assert {c.partition for c in kept.trace.candidates} == {"g0", "g5"}
    assert "p/g5" not in kept.trace.pruned[0].partitions


def test_bounds_allow_auto_to_prefer_paper_where_learned_has_erred() -> None:
    """Learned says `a` waits long, but its recent errors there are worse than paper's, so
    `auto` takes paper's free slot at `a`: the bound must not rule `a` out on learned alone."""
    a = profile("a", gpu_partition("g", count=1))
    b = profile("b", gpu_partition("g", count=1))
    sites, snap = {"a": site(a), "b": site(b)}, snapshot(state(a), state(b))
    obs = [
        WaitObservation(site=s, partition="g", gpus=1, wait_s=w, observed_at=NOW)
        for s, w in (("a", 5000.0), ("b", 100.0))
        for _ in range(3)
    ]
    history = WaitHistory(obs, now=NOW, settings=Policy().settings)
    errs = EstimatorErrors(
        [
            ErrorObservation("a", "g", m, predicted, 20.0, NOW - timedelta(hours=1))
            for m, predicted in (("learned", 5000.0), ("paper", 10.0))
            for _ in range(3)
        ],
        now=NOW,
        window_s=86400.0,
    )
    one = env(gpus=1, wall_time="1h")
    kw: dict[str, Any] = {"now": NOW, "history": history, "errors": errs}
    full = place(one, PlacementInputs(snap, sites, prune=False, **kw))
    assert isinstance(full, Placement) and full.site == "a"
    assert full.estimates.wait_source.startswith("paper")
    _check(place(one, PlacementInputs(snap, sites, top=1, **kw)), full, 1)


def test_a_site_at_its_cap_is_left_out_for_the_later_children() -> None:
    """The daemon's per-site bound on submissions per cycle: `a` may take one more child; the
    next goes to `b`, and with `b` capped at zero too, the third has nowhere to go."""
    a = profile("a", gpu_partition("g", count=4))
    b = profile("b", gpu_partition("g", count=4))
    sites = {"a": site(a), "b": site(b)}
    snap = snapshot(state(a), state(b, g={"pending_jobs": 3}))
    kid = env(gpus=1, wall_time="1h")
    out = place_group([kid] * 3, PlacementInputs(snap, sites, now=NOW), site_caps={"a": 1})
    assert [d.site for d in out if isinstance(d, Placement)] == ["a", "b", "b"]
    capped = place_group(
        [kid] * 2, PlacementInputs(snap, sites, now=NOW), site_caps={"a": 1, "b": 0}
    )
    assert isinstance(capped[0], Placement) and capped[0].site == "a"
    assert isinstance(capped[1], Unschedulable)
    assert "the envelope excludes a" in "; ".join(r for c in capped[1].reasons for r in c.reasons)
