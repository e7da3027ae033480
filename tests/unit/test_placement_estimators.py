"""Wait (paper, scheduler, learned), runtime scaling, environment preparation, budgets."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from fedhpc.domain import Credit, Shape
from fedhpc.placement import (
    EnvCache,
    RuntimeDeclaration,
    RuntimeModel,
    RuntimeObservation,
    Settings,
    WaitHistory,
    WaitMethod,
    WaitObservation,
    allowed_budget,
    paper_wait,
    size_bucket,
)
from fedhpc.placement.context import Ledger, Live
from fedhpc.placement.estimators import SchedulerKey, env_prep_s, estimate_wait
from tests.unit.test_placement_world import NOW, env, gpu_partition, profile, pstate, site, state

S = Settings()
G = gpu_partition("g", count=4)


def live(**kw: int) -> Live:
    return Live.of("s", pstate("g", G, **kw), None)


def obs(wait: float, *, gpus: int = 1, hours_ago: float = 1, part: str = "g") -> WaitObservation:
    return WaitObservation(
        site="s",
        partition=part,
        gpus=gpus,
        cpus=8,
        wait_s=wait,
        observed_at=NOW - timedelta(hours=hours_ago),
    )


def test_paper_wait_uses_free_request_sized_slots_first() -> None:
    w = paper_wait(Shape(gpus=4), live(pending_jobs=823), S)
    assert w.wait_s == S.dispatch_s and w.source.startswith("paper:free-slots")


def test_paper_wait_falls_back_to_queue_depth_without_a_slot() -> None:
    w = paper_wait(Shape(gpus=4), live(free_gpus=1, max_free_gpus_on_node=1, pending_jobs=3), S)
    assert w.wait_s == S.dispatch_s + 4 * S.per_pending_s
    assert w.p90_s == w.wait_s * S.uncertainty_factor


def test_paper_wait_never_infers_free_gpus_from_node_state_alone() -> None:
    # 6 GPUs free in total, but no node has 4 of them: a 4-GPU job has no slot now.
    w = paper_wait(Shape(gpus=4), live(free_gpus=6, max_free_gpus_on_node=3, pending_jobs=0), S)
    assert w.source.startswith("paper:queue-depth")


def test_learned_wait_uses_the_request_size_bucket_median_and_p90() -> None:
    hist = WaitHistory(
        [obs(w, gpus=4) for w in (100, 200, 300, 400, 5000)] + [obs(1, gpus=1)] * 5,
        now=NOW,
        settings=S,
    )
    w = hist.estimate("s", "g", Shape(gpus=4))
    assert w is not None and (w.wait_s, w.p90_s) == (300, 5000)
    assert w.source.startswith("learned:gpu:4-7")
    assert size_bucket(4, 8, 1) == "gpu:4-7" and size_bucket(0, 48, 1) == "cpu:32-63"


def test_learned_wait_falls_back_to_the_partition_then_to_nothing() -> None:
    hist = WaitHistory([obs(60, gpus=2), obs(90, gpus=4), obs(30, gpus=8)], now=NOW, settings=S)
    w = hist.estimate("s", "g", Shape(gpus=1))
    assert w is not None and w.source.startswith("learned:partition")
    assert w.wait_s == 60
    assert WaitHistory([obs(60)] * 2, now=NOW, settings=S).estimate("s", "g", Shape(gpus=1)) is None


def test_learned_wait_never_vouches_for_a_large_request_with_small_ones() -> None:
    """Three 1-GPU jobs that started at once say nothing about a 4-GPU job's wait: the
    fallback uses only requests at least as large, and here there are none."""
    hist = WaitHistory([obs(0, gpus=1)] * 3, now=NOW, settings=S)
    assert hist.estimate("s", "g", Shape(gpus=4)) is None
    bigger = WaitHistory([obs(0, gpus=1)] * 3 + [obs(600, gpus=8)] * 3, now=NOW, settings=S)
    w = bigger.estimate("s", "g", Shape(gpus=4))
    assert w is not None and w.wait_s == 600


def test_learned_wait_ignores_observations_outside_the_window_and_after_now() -> None:
    old = [obs(9999, hours_ago=24 * 30)] * 5
    future = [obs(9999, hours_ago=-1)] * 5
    assert WaitHistory(old + future, now=NOW, settings=S).estimate("s", "g", Shape(gpus=1)) is None


def test_auto_wait_prefers_scheduler_then_learned_then_paper() -> None:
    shape, key = Shape(gpus=1), "k"
    hist = WaitHistory([obs(700)] * 3, now=NOW, settings=S)
    sched: dict[SchedulerKey, datetime] = {("s", "g", None, None, key): NOW + timedelta(seconds=90)}
    args: dict[str, Any] = {
        "site": "s",
        "partition": "g",
        "key": key,
        "shape": shape,
        "live": live(pending_jobs=2),  # someone is queued ahead: the scheduler's word counts
        "now": NOW,
        "settings": S,
    }
    assert estimate_wait(WaitMethod.AUTO, history=hist, scheduler=sched, **args).wait_s == 90
    assert estimate_wait(WaitMethod.AUTO, history=hist, scheduler={}, **args).wait_s == 700
    paper = estimate_wait(WaitMethod.AUTO, history=None, scheduler=None, **args)
    assert paper.source.startswith("paper")
    learned_only = estimate_wait(WaitMethod.LEARNED, history=hist, scheduler=sched, **args)
    assert learned_only.wait_s == 700


def test_a_free_slot_with_only_blocked_jobs_queued_starts_now_whatever_slurm_predicts() -> None:
    """Slurm's will-run test plans dependency-blocked jobs ahead of ours; they never start
    first, so a free request-sized slot means the job starts at once."""
    shape, key = Shape(gpus=4, cpus=8), "k"
    sched: dict[SchedulerKey, datetime] = {
        ("s", "g", None, None, key): NOW + timedelta(seconds=3000)
    }

    def wait(**kw: int) -> tuple[float, str]:
        w = estimate_wait(
            WaitMethod.SCHEDULER,
            site="s",
            partition="g",
            key=key,
            shape=shape,
            live=live(**kw),
            now=NOW,
            settings=S,
            history=None,
            scheduler=sched,
        )
        return w.wait_s, w.source

    assert wait(pending_jobs=6, blocked_pending_jobs=6) == (S.dispatch_s, "scheduler:free-now")
    assert wait() == (S.dispatch_s, "scheduler:free-now")
    # One job that can take the slot is queued ahead: the scheduler knows who goes first.
    assert wait(pending_jobs=7, blocked_pending_jobs=6) == (3000, "scheduler")
    # No request-sized slot on any node (three GPUs free): the scheduler's estimate stands.
    assert wait(free_gpus=3, blocked_pending_jobs=0) == (3000, "scheduler")


def test_declared_runtime_scales_by_amdahl() -> None:
    e = env(gpus=(1, 4))
    m = RuntimeModel.build(e, RuntimeDeclaration(seconds=1000, gpus=1, serial_fraction=0.1), [], S)
    assert m.runtime(Shape(gpus=1))[0] == 1000
    assert m.runtime(Shape(gpus=4))[0] == 100 + 900 / 4


def test_runtime_history_is_exact_where_observed_and_fitted_elsewhere() -> None:
    hist = [RuntimeObservation(gpus=1, runtime_s=1000), RuntimeObservation(gpus=2, runtime_s=600)]
    m = RuntimeModel.build(env(gpus=(1, 4)), None, hist, S)
    assert m.runtime(Shape(gpus=2)) == (600, "history:exact")
    r4, src = m.runtime(Shape(gpus=4))
    assert src == "history:fit" and r4 == 400  # R = 200 + 800/u through both points


def test_runtime_without_information_comes_from_the_minimum_wall_time() -> None:
    m = RuntimeModel.build(env(cpus=(4, 64), wall_time="1h"), None, [], S)
    assert m.runtime(Shape(cpus=4))[0] == 3600 and m.source == "envelope:wall_time.min"


def test_environment_preparation_is_free_when_cached() -> None:
    cache = EnvCache(cached={"a": ("torch.sif",)}, prepare_s={"b": 120})
    assert env_prep_s("a", "torch.sif", cache, S) == (0.0, "cached")
    assert env_prep_s("b", "torch.sif", cache, S)[0] == 120
    assert env_prep_s("c", "torch.sif", cache, S)[0] == S.default_prepare_s
    assert env_prep_s("c", None, None, S)[0] == 0


def test_budget_is_the_tightest_of_task_account_site_and_balance() -> None:
    p = profile("p", G)
    st = state(p, accounts=("a",), credit=(Credit(account="a", used=40.0, balance=500.0),))
    s = site(p, budget=100.0, task_budget=80.0, accounts=[{"name": "a", "budget": 70.0}])
    b = allowed_budget(s, st, "a", None, None)
    assert b.allowed == 30.0 and "account a" in b.binding  # 70 - 40 used
    assert allowed_budget(s, st, "a", 5.0, None).allowed == 5.0
    ledger = Ledger()
    ledger.claim("p", "g", "a", Shape(gpus=1), 25.0)
    assert allowed_budget(s, st, "a", None, ledger).allowed == 5.0


def test_estimators_are_judged_by_recent_error_and_auto_prefers_the_better_one() -> None:
    from datetime import UTC, datetime

    from fedhpc.placement import ErrorObservation, EstimatorErrors, WaitMethod, WaitObservation
    from fedhpc.placement.context import Live
    from fedhpc.placement.estimators import WaitHistory, estimate_wait
    from fedhpc.placement.policy import Settings

    now = datetime(2026, 1, 1, 12, tzinfo=UTC)
    s = Settings()
    shape = Shape(cpus=8, wall_time_s=600)
    live = Live(
        free_gpus=0,
        max_free_gpus_on_node=0,
        free_cpus=0,
        max_free_cpus_on_node=0,
        free_memory_mib=0,
        free_nodes=0,
        usable_nodes=1,
        pending=2,
        running=1,
        user_jobs=0,
    )
    # learned (from history) says ~1000 s; paper (queue depth 2) says 10 + 3 x 120 = 370 s.
    hist = WaitHistory(
        [
            WaitObservation(
                site="a",
                partition="p",
                cpus=8,
                wait_s=1000.0,
                observed_at=now - timedelta(minutes=i),
            )
            for i in range(5)
        ],
        now=now,
        settings=s,
    )
    obs = []
    for i in range(6):  # observed waits near 400 s: paper was close, learned far off
        at = now - timedelta(minutes=10 + i)
        obs += [
            ErrorObservation("a", "p", "learned", 1000.0, 400.0 + i, at),
            ErrorObservation("a", "p", "paper", 370.0, 400.0 + i, at),
        ]
    obs.append(ErrorObservation("a", "p", "paper", 0.0, 5000.0, now + timedelta(hours=1)))  # future
    errors = EstimatorErrors(obs, now=now, window_s=86400.0)
    paper = errors.get("a", "p", "paper")
    learned = errors.get("a", "p", "learned")
    assert paper is not None and learned is not None
    assert (paper.n, paper.median_abs_s, paper.median_bias_s) == (6, 32.5, -32.5)
    assert learned.median_abs_s == 597.5 and learned.median_bias_s == 597.5
    assert errors.get("a", "q", "paper") is None
    kw: dict[str, Any] = {
        "site": "a",
        "partition": "p",
        "key": "k",
        "shape": shape,
        "live": live,
        "now": now,
        "settings": s,
        "history": hist,
        "scheduler": None,
    }
    plain = estimate_wait(WaitMethod.AUTO, **kw)
    assert plain.source.startswith("learned") and plain.wait_s == 1000.0
    assert dict(plain.by_method) == {"learned": 1000.0, "paper": 370.0}
    judged = estimate_wait(WaitMethod.AUTO, errors=errors, **kw)
    assert judged.wait_s == 370.0
    assert judged.source.startswith("paper:queue-depth=2; paper preferred: recent error 32 s")
    # An explicit `learned` is obeyed; too few observations decide nothing.
    assert estimate_wait(WaitMethod.LEARNED, errors=errors, **kw).wait_s == 1000.0
    few = EstimatorErrors(obs[:4], now=now, window_s=86400.0)
    assert estimate_wait(WaitMethod.AUTO, errors=few, **kw).wait_s == 1000.0
