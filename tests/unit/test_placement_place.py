"""`place`: policies, tie-breaks, UNSCHEDULABLE explanations, traces and determinism."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from fedhpc.domain import ChargeKind, ChargeModel, Credit, ResourceSnapshot, SiteState
from fedhpc.domain.config import Site
from fedhpc.errors import ValidationFailed
from fedhpc.placement import (
    Category,
    DecisionTrace,
    Objective,
    Outcome,
    Placement,
    PlacementInputs,
    Policy,
    PolicyKind,
    RuntimeDeclaration,
    Unschedulable,
    WaitMethod,
    WaitObservation,
    place,
    place_group,
    shape_key,
)
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

# The paper's trace: one system with a deep queue but free GPUs, another with a short queue
# and a single free GPU.
BUSY = profile("busy", gpu_partition("gh", "gh200", memory_gib=96, count=20))
SCARCE = profile("scarce", gpu_partition("h100", "h100", memory_gib=80, count=2))
CPUS = profile("cpus", cpu_partition("cpu"), charge=ChargeModel(kind=ChargeKind.CORE_HOURS))


def paper_world() -> tuple[dict[str, Site], ResourceSnapshot]:
    sites = {p.name: site(p) for p in (BUSY, SCARCE, CPUS)}
    snap = snapshot(
        state(BUSY, gh={"pending_jobs": 823, "free_gpus": 35, "max_free_gpus_on_node": 4}),
        state(SCARCE, h100={"pending_jobs": 2, "free_gpus": 1, "max_free_gpus_on_node": 1}),
        state(CPUS),
    )
    return sites, snap


def placed(decision: Placement | Unschedulable) -> Placement:
    assert isinstance(decision, Placement), getattr(decision, "hint", decision)
    return decision


def test_best_feasible_sends_four_gpus_to_free_gpus_although_the_queue_is_longer() -> None:
    sites, snap = paper_world()
    four = env(gpus=4, cpus=8, wall_time="1h")
    best = placed(place(four, PlacementInputs(snap, sites, Policy(), now=NOW)))
    shortest = placed(
        place(four, PlacementInputs(snap, sites, Policy(kind=PolicyKind.SHORTEST_QUEUE), now=NOW))
    )
    assert best.site == "busy"
    assert best.estimates.wait_source.startswith("paper:free-slots")
    assert shortest.site == "scarce"  # fewest pending jobs, but only one GPU free


def test_fixed_site_policy_keeps_its_site_while_feasible_and_falls_back_otherwise() -> None:
    sites, snap = paper_world()
    four = env(gpus=4, cpus=8, wall_time="1h")
    fixed = Policy(kind=PolicyKind.FIXED_SITE, site="scarce")
    assert placed(place(four, PlacementInputs(snap, sites, fixed, now=NOW))).site == "scarce"
    h100_only = env(gpus=4, cpus=8, wall_time="1h", accelerator_types=("gh200",))
    assert placed(place(h100_only, PlacementInputs(snap, sites, fixed, now=NOW))).site == "busy"
    strict = fixed.model_copy(update={"fallback": False})
    out = place(h100_only, PlacementInputs(snap, sites, strict, now=NOW))
    assert isinstance(out, Unschedulable)
    assert any("fixed-site" in r for c in out.reasons for r in c.reasons)


def test_impossible_accelerator_memory_is_unschedulable_everywhere_with_reasons() -> None:
    sites, snap = paper_world()
    out = place(env(gpus=1, min_accelerator_memory_gib=200), PlacementInputs(snap, sites, now=NOW))
    assert isinstance(out, Unschedulable)
    assert out.state == "unschedulable"
    assert {c.id.split("/")[0] for c in out.reasons} == {"busy", "scarce", "cpus"}
    for c in out.reasons:
        assert any(r.startswith("accelerator:") for r in c.reasons), c
    assert "min_accelerator_memory_gib" in out.hint and "96 GiB" in out.hint
    assert out.trace.chosen is None and out.trace.feasible == 0


def test_only_feasible_site_out_of_credit_is_unschedulable_with_the_credit_reason() -> None:
    sites, snap = paper_world()
    sites["busy"] = site(BUSY, budget=1.0)
    gh200 = env(gpus=4, cpus=8, wall_time="2h", accelerator_types=("gh200",))
    out = place(gh200, PlacementInputs(snap, sites, now=NOW))
    assert isinstance(out, Unschedulable)
    busy = [c for c in out.reasons if c.id.startswith("busy/")]
    assert busy and all(any(r.startswith("credit: out of credit") for r in c.reasons) for c in busy)
    assert "budget" in out.hint


def test_p90_objective_prefers_the_steady_queue_over_the_erratic_one() -> None:
    a = profile("a", gpu_partition("g", count=4))
    b = profile("b", gpu_partition("g", count=4))
    sites = {"a": site(a), "b": site(b)}
    snap = snapshot(state(a, g={"free_gpus": 0}), state(b, g={"free_gpus": 0}))
    hist = [
        *(
            WaitObservation(
                site="a", partition="g", gpus=1, wait_s=w, observed_at=NOW - timedelta(hours=i + 1)
            )
            for i, w in enumerate([60, 60, 60, 60, 60, 60, 60, 60, 9000, 9000])
        ),
        *(
            WaitObservation(
                site="b",
                partition="g",
                gpus=1,
                wait_s=600,
                observed_at=NOW - timedelta(hours=i + 1),
            )
            for i in range(10)
        ),
    ]
    one = env(gpus=1, cpus=4)
    expected = placed(place(one, PlacementInputs(snap, sites, Policy(), now=NOW, history=hist)))
    p90 = placed(
        place(
            one,
            PlacementInputs(snap, sites, Policy(objective=Objective.P90), now=NOW, history=hist),
        )
    )
    assert expected.site == "a" and expected.estimates.wait_source.startswith("learned")
    assert p90.site == "b"


def test_scheduler_estimates_override_the_paper_estimate_where_given() -> None:
    sites, snap = paper_world()
    four = env(gpus=4, cpus=8, wall_time="1h")
    first = placed(place(four, PlacementInputs(snap, sites, now=NOW)))
    key = (first.site, first.partition, first.account, first.qos, shape_key(first.shape))
    late = {key: NOW + timedelta(hours=5)}
    second = placed(place(four, PlacementInputs(snap, sites, now=NOW, estimates=late)))
    assert second.site != first.site
    chosen_before = next(c for c in second.trace.candidates if c.id == first.candidate_id)
    assert chosen_before.estimates is not None
    assert chosen_before.estimates.wait_source == "scheduler"
    paper_only = placed(
        place(
            four,
            PlacementInputs(snap, sites, Policy(wait=WaitMethod.PAPER), now=NOW, estimates=late),
        )
    )
    assert paper_only.site == first.site


def test_ties_go_to_lower_credit_fraction_then_waste_then_preference_then_id() -> None:
    x = profile("x", gpu_partition("g"))
    y = profile("y", gpu_partition("g"))
    snap = snapshot(state(x), state(y))
    one = env(gpus=1, cpus=4)
    plain = {"x": site(x), "y": site(y)}
    decision = placed(place(one, PlacementInputs(snap, plain, now=NOW)))
    assert decision.site == "x"  # everything equal: the stable id decides
    assert decision.trace.key_fields[-1] == "id"
    preferred = placed(
        place(
            env(gpus=1, cpus=4, preferences={"sites": ["y"]}), PlacementInputs(snap, plain, now=NOW)
        )
    )
    assert preferred.site == "y"
    whole = profile(
        "x", gpu_partition("g", charge=ChargeModel(kind=ChargeKind.GPU_HOURS, whole_node=True))
    )
    wasteful = {"x": site(whole), "y": site(y)}
    assert (
        placed(
            place(one, PlacementInputs(snapshot(state(whole), state(y)), wasteful, now=NOW))
        ).site
        == "y"
    )
    budgets = {"x": site(x, budget=10.0), "y": site(y, budget=1000.0)}
    assert (
        placed(place(one, PlacementInputs(snap, budgets, now=NOW))).site == "y"
    )  # smaller share of credit


def test_joint_sizing_compares_several_shapes_per_partition() -> None:
    p = profile("p", gpu_partition("g", count=2))
    sites = {"p": site(p)}
    snap = snapshot(state(p, g={"free_gpus": 1, "max_free_gpus_on_node": 1, "pending_jobs": 40}))
    ddp = env(gpus=(1, 4), cpus=(4, 32), wall_time="2h")
    runtime = RuntimeDeclaration(seconds=4 * 3600, gpus=1, cpus=8, serial_fraction=0.05)
    joint = placed(place(ddp, PlacementInputs(snap, sites, now=NOW, runtime=runtime)))
    shapes = {c.shape.gpus for c in joint.trace.candidates if c.partition == "g"}
    assert shapes == {1, 2, 4}
    assert joint.shape.gpus == 4  # waiting for 4 GPUs beats running 4 h on the free one
    single = place(
        ddp, PlacementInputs(snap, sites, Policy(joint_sizing=False), now=NOW, runtime=runtime)
    )
    assert isinstance(single, Unschedulable)  # 1 GPU needs 4 h; the envelope allows 2 h
    assert len(single.trace.candidates) == 1
    assert "predicted runtime 14400 s" in single.reasons[0].reasons[0]


def test_a_shape_whose_predicted_runtime_exceeds_its_wall_time_is_rejected_with_that_reason() -> (
    None
):
    p = profile("p", gpu_partition("g", count=4))
    sites = {"p": site(p)}
    snap = snapshot(state(p, g={"free_gpus": 4, "max_free_gpus_on_node": 4}))
    job = env(gpus=(1, 4), cpus=(4, 32), wall_time="1h")
    runtime = RuntimeDeclaration(seconds=2 * 3600, gpus=1, cpus=8, serial_fraction=0.05)
    out = placed(place(job, PlacementInputs(snap, sites, now=NOW, runtime=runtime)))
    assert out.estimates.runtime_s * 1.1 <= out.shape.wall_time_s  # the chosen one finishes
    short = [c for c in out.trace.candidates if not c.feasible]
    # 2 h on one GPU, 1.05 h on two (+10 %) cannot fit in 1 h; 0.58 h on four can
    assert {c.shape.gpus for c in short} == {1, 2}
    assert all(any("exceeds the 3600 s" in f for f in c.failures()) for c in short)
    assert out.shape.gpus == 4


def test_group_children_see_earlier_claims_on_capacity() -> None:
    a = profile("a", gpu_partition("g", count=2))
    b = profile("b", gpu_partition("g", count=2))
    sites = {"a": site(a), "b": site(b)}
    snap = snapshot(state(a), state(b, g={"pending_jobs": 3}))
    kids = [env(gpus=4, cpus=8, wall_time="1h")] * 3
    out = [placed(d) for d in place_group(kids, PlacementInputs(snap, sites, now=NOW))]
    assert [d.site for d in out] == [
        "a",
        "a",
        "b",
    ]  # a has two free nodes; the third waits less on b


def test_invalid_envelope_raises_validation_with_the_field() -> None:
    sites, snap = paper_world()
    with pytest.raises(ValidationFailed) as err:
        place(env(gpus=1, accelerator_types=("tpu",)), PlacementInputs(snap, sites, now=NOW))
    assert err.value.code == "validation"
    assert err.value.issues[0].field == "accelerator_types[0]"


def test_trace_is_json_and_round_trips() -> None:
    sites, snap = paper_world()
    decision = placed(place(env(gpus=(1, 4), cpus=8), PlacementInputs(snap, sites, now=NOW)))
    text = decision.trace.model_dump_json()
    again = DecisionTrace.model_validate_json(text)
    assert again.model_dump_json() == text
    assert again.chosen == decision.candidate_id
    feasible = [c for c in again.candidates if c.feasible]
    assert [c.key for c in feasible] == sorted(c.key for c in feasible if c.key)
    for c in again.candidates:
        assert [r.category for r in c.rules] == list(Category)
        assert c.feasible == all(r.outcome is not Outcome.FAIL for r in c.rules)
    assert decision.model_dump_json()  # the whole placement serializes too


def _shuffled(
    rng: random.Random, sites: dict[str, Site], snap: ResourceSnapshot
) -> tuple[dict[str, Site], ResourceSnapshot]:
    names = list(sites)
    rng.shuffle(names)
    out_sites = {}
    for n in names:
        s = sites[n]
        parts = list(s.profile.partitions)
        rng.shuffle(parts)
        accts = list(s.user.accounts)
        rng.shuffle(accts)
        out_sites[n] = Site(
            s.profile.model_copy(update={"partitions": tuple(parts)}),
            s.user.model_copy(update={"accounts": tuple(accts)}),
        )
    states: dict[str, SiteState] = {}
    for n in rng.sample(names, len(names)):
        st = snap.sites[n]
        parts_state = list(st.partitions)
        rng.shuffle(parts_state)
        accounts = list(st.accounts)
        rng.shuffle(accounts)
        states[n] = st.model_copy(
            update={"partitions": tuple(parts_state), "accounts": tuple(accounts)}
        )
    return out_sites, snap.model_copy(update={"sites": states})


def _rich_world() -> tuple[dict[str, Site], ResourceSnapshot]:
    a = profile(
        "a", gpu_partition("g1"), gpu_partition("g2", "h100", memory_gib=80), cpu_partition("c")
    )
    b = profile("b", gpu_partition("g1", count=4), cpu_partition("c2"), cpu_partition("c1"))
    sites = {"a": site(a), "b": site(b, accounts=[{"name": "bb"}, {"name": "ba"}])}
    snap = snapshot(
        state(a, accounts=("p2", "p1"), g1={"free_gpus": 2}, g2={"pending_jobs": 5}),
        state(b, accounts=("bb", "ba"), g1={"pending_jobs": 1}),
    )
    return sites, snap


@pytest.mark.parametrize(
    "envelope",
    [
        env(gpus=(1, 4), cpus=(4, 16), wall_time=("1h", "2h")),
        env(cpus=(2, 64)),
        env(gpus=2, min_accelerator_memory_gib=500),
    ],
)
def test_shuffled_input_order_gives_the_same_decision_and_trace(envelope: object) -> None:
    sites, snap = _rich_world()
    reference = place(envelope, PlacementInputs(snap, sites, now=NOW)).model_dump_json()  # type: ignore[arg-type]
    for seed in range(60):
        rng = random.Random(seed)
        s2, snap2 = _shuffled(rng, sites, snap)
        again = place(envelope, PlacementInputs(snap2, s2, now=NOW)).model_dump_json()  # type: ignore[arg-type]
        assert again == reference, f"seed {seed}"


def test_same_inputs_give_identical_decisions() -> None:
    sites, snap = _rich_world()
    e = env(gpus=(1, 2), cpus=8)
    first = place(e, PlacementInputs(snap, sites, now=NOW))
    assert all(place(e, PlacementInputs(snap, sites, now=NOW)) == first for _ in range(5))


def test_stale_snapshot_makes_every_candidate_fail_freshness() -> None:
    sites, snap = paper_world()
    out = place(env(gpus=1), PlacementInputs(snap, sites, now=NOW + timedelta(hours=2)))
    assert isinstance(out, Unschedulable)
    assert all(any(r.startswith("freshness:") for r in c.reasons) for c in out.reasons)
    assert "refresh" in out.hint


def test_probe_accounts_follow_the_site_convention_for_the_partition_kind() -> None:
    p = profile(
        "d",
        gpu_partition("g"),
        cpu_partition("c"),
        conventions={"account_pattern": "fedhpc-{cpu|gpu}"},
    )
    snap = snapshot(state(p, accounts=("root", "fedhpc-cpu", "fedhpc-gpu")))
    gpu = placed(place(env(gpus=1), PlacementInputs(snap, {"d": site(p)}, now=NOW)))
    cpu = placed(place(env(cpus=2), PlacementInputs(snap, {"d": site(p)}, now=NOW)))
    assert (gpu.account, cpu.account) == ("fedhpc-gpu", "fedhpc-cpu")


def test_configured_account_budget_limits_the_charge() -> None:
    p = profile("p", gpu_partition("g"))
    snap = snapshot(state(p, accounts=("acct",), credit=(Credit(account="acct", used=3.0),)))
    sites = {"p": site(p, accounts=[{"name": "acct", "budget": 4.0}])}
    ok = placed(place(env(gpus=1, wall_time="1h"), PlacementInputs(snap, sites, now=NOW)))
    assert ok.estimates.charge == 1.0
    out = place(env(gpus=2, wall_time="1h"), PlacementInputs(snap, sites, now=NOW))
    assert isinstance(out, Unschedulable)
    assert "account acct budget 4" in out.reasons[0].reasons[0]


def test_a_gpu_shape_of_an_envelope_that_counts_cpus_is_not_predicted_past_its_wall_time() -> None:
    """gpus.min = 0 made the minimum shape count CPUs (2 units) and a 1-GPU shape count 1:
    the Amdahl prediction (1,140 s) exceeded the 600 s requested. The envelope's own claim
    (600 s suffice at the minimum) caps it."""
    p = profile("p", gpu_partition("g", count=4))
    sites = {"p": site(p)}
    snap = snapshot(state(p))
    job = env(gpus=(0, 1), cpus=(2, 2), wall_time="10m")
    out = placed(place(job, PlacementInputs(snap, sites, now=NOW)))
    assert out.shape.gpus == 1
    assert out.estimates.runtime_s <= out.shape.wall_time_s == 600


def test_a_missing_scheduler_estimate_falls_back_and_the_trace_says_why() -> None:
    sites, snap = paper_world()
    four = env(gpus=4, cpus=8, wall_time="1h")
    first = placed(place(four, PlacementInputs(snap, sites, now=NOW)))
    key = (first.site, first.partition, first.account, first.qos, shape_key(first.shape))
    notes = {"scarce": "no answer within 2 s"}
    d = placed(
        place(
            four, PlacementInputs(snap, sites, now=NOW, estimates={key: NOW}, estimate_notes=notes)
        )
    )
    by_site = {c.site: c for c in d.trace.candidates if c.feasible}
    chosen = by_site[first.site]
    assert chosen.estimates is not None and chosen.estimates.wait_source.startswith("scheduler")
    for name, c in by_site.items():
        if name == first.site:
            continue
        assert c.estimates is not None
        src = c.estimates.wait_source
        assert src.startswith("paper:") and "; no scheduler estimate: " in src
        if name == "scarce":
            assert src.endswith("no scheduler estimate: no answer within 2 s")
    assert d.trace.estimates_note.startswith(f"scheduler estimates for 1 of {d.trace.feasible}")
    assert "scarce: no answer within 2 s" in d.trace.estimates_note
    # Nobody asked (a history-only caller): the sources carry no note, the trace neither.
    plain = placed(place(four, PlacementInputs(snap, sites, now=NOW)))
    assert all(
        "no scheduler estimate" not in (c.estimates.wait_source if c.estimates else "")
        for c in plain.trace.candidates
    )
    assert plain.trace.estimates_note == ""
