"""Scheduler start estimates are each site's (and each account's and QoS's) alone: a site whose
ssh login needs a person gives no estimate and a reason, the others still answer and placement
still places; two QoS on one partition and shape keep their own answers. Real placement and a
real store; the transports answer as a login that needs a person and as `sbatch --test-only`
does (tests/integration/test_placement_devfed.py asks real Slurm)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any, cast

from fedhpc.adapters.command import BATCH_MARK, Command, CommandResult
from fedhpc.adapters.site import SiteAdapter
from fedhpc.adapters.transports.base import TransportUnavailable
from fedhpc.domain import Shape
from fedhpc.domain.config import Site
from fedhpc.orchestrator.estimates import ACCOUNTING_EVERY_S, ACCOUNTING_OVERLAP_S
from fedhpc.orchestrator.records import TaskRecord
from fedhpc.orchestrator.start_estimates import EstimateCache, EstimateRequest, ask_scheduler
from fedhpc.placement import Placement, PlacementInputs, Policy, place, shape_key
from fedhpc.placement.estimators import SchedulerKey
from fedhpc.store import Store
from tests.unit.test_placement_world import NOW, cpu_partition, env, profile, site, snapshot, state
from tests.unit.test_submit_accept import Clock, _orchestrator, _req

ALPHA = site(profile("alpha", cpu_partition("cpu")))
BETA = site(profile("beta", cpu_partition("cpu")))
NEEDS_PERSON = "ssh to alice@alpha.example was refused: Permission denied (keyboard-interactive)"


class NeedsPerson:
    """An ssh transport with no open master whose login needs a password or MFA."""

    def __init__(self) -> None:
        self.calls = 0

    async def run(self, command: Command) -> CommandResult:
        self.calls += 1
        raise TransportUnavailable(NEEDS_PERSON, hint="Run `fedhpc connect alpha` in a terminal.")

    async def aclose(self) -> None:
        return None


class WillRun:
    """Answers a batched `sbatch --test-only` as Slurm does: one start per section, later for
    a script that names a QoS in `slow` (SLURM_TIME_FORMAT=%s: epoch seconds)."""

    def __init__(self, start: datetime, *, slow: tuple[str, ...] = ()) -> None:
        self.start, self.slow = start, slow
        self.calls = 0

    async def run(self, command: Command) -> CommandResult:
        self.calls += 1
        script = command.stdin or ""
        out = []
        for name in re.findall(rf"echo '{BATCH_MARK} begin (\w+)'", script):
            section = script.split(f"begin {name}'", 1)[1].split(f"end {name}", 1)[0]
            late = any(f"--qos={q}" in section for q in self.slow)
            at = int((self.start + timedelta(hours=3 if late else 0)).timestamp())
            out += [
                f"{BATCH_MARK} begin {name}",
                f"sbatch: Job 7 to start at {at} using 4 processors on nodes n1 in partition cpu",
                f"{BATCH_MARK} end {name} 0",
            ]
        return CommandResult(0, "\n".join(out) + "\n", "")

    async def aclose(self) -> None:
        return None


def _adapter(s: Site, transport: object) -> SiteAdapter:
    return SiteAdapter(s, cast(Any, transport))


def _req_for(s: str, qos: str | None = None) -> EstimateRequest:
    return EstimateRequest(s, "cpu", "proj", Shape(cpus=4, wall_time_s=600), qos)


async def test_a_login_that_needs_a_person_is_that_sites_reason_and_the_others_still_answer() -> (
    None
):
    now = [0.0]
    cache = EstimateCache(ttl_s=10, clock=lambda: now[0])
    alpha, beta = NeedsPerson(), WillRun(NOW + timedelta(minutes=5))
    adapters = {"alpha": _adapter(ALPHA, alpha), "beta": _adapter(BETA, beta)}
    answer = await ask_scheduler([_req_for("alpha"), _req_for("beta")], adapters, cache=cache)
    assert answer.starts == {_req_for("beta").key: NOW + timedelta(minutes=5)}
    assert answer.notes == {"alpha": f"unreachable ({NEEDS_PERSON})"}
    # The failure is remembered: the next pass does not ask alpha again, and says why.
    again = await ask_scheduler([_req_for("alpha"), _req_for("beta")], adapters, cache=cache)
    assert alpha.calls == 1 and beta.calls == 1  # beta's answer came from the cache
    assert again.notes == {"alpha": f"unreachable ({NEEDS_PERSON})"}
    assert again.starts == answer.starts


async def test_decide_and_a_batch_prefetch_still_place_when_one_sites_login_needs_a_person(
    store: Store,
) -> None:
    clock = Clock()
    o = _orchestrator(store, clock, alpha=ALPHA, beta=BETA)
    o.collector.latest["alpha"] = state(ALPHA.profile)
    o.collector.latest["beta"] = state(BETA.profile)
    o.adapters.update(
        alpha=_adapter(ALPHA, NeedsPerson()),
        beta=_adapter(BETA, WillRun(NOW + timedelta(hours=1))),
    )
    task = TaskRecord(
        id="t1", request=_req(envelope=env(cpus=4)), idempotency_key="k", created_at=NOW
    )
    decision = await o.planner.decide(task)
    assert isinstance(decision, Placement), decision
    assert f"alpha: unreachable ({NEEDS_PERSON})" in decision.trace.estimates_note
    beta = next(c for c in decision.trace.candidates if c.site == "beta" and c.feasible)
    assert beta.estimates is not None and beta.estimates.wait_source.startswith("scheduler")
    # A batch (placer._batch, place_queued) asks through `prefetch`: an answer, not an error.
    answer = await o.planner.prefetch([task], history=None, ledger=None)
    assert answer is not None and answer.notes["alpha"].startswith("unreachable (")
    assert any(k[0] == "beta" for k in answer.starts)


def test_two_qos_on_one_partition_and_shape_keep_their_own_scheduler_answers() -> None:
    accounts = [{"name": "proj", "qos": "normal"}, {"name": "proj2", "qos": "low"}]
    qos = site(profile("q", cpu_partition("cpu")), accounts=accounts)
    # Jobs queued ahead: the scheduler's word counts (with a slot free and none, it starts now).
    snap = snapshot(state(qos.profile, accounts=("proj", "proj2"), cpu={"pending_jobs": 3}))
    job = env(cpus=4, wall_time="10m")
    first = place(job, PlacementInputs(snap, {"q": qos}, Policy(), now=NOW))
    assert isinstance(first, Placement)
    by_qos = {c.qos: c for c in first.trace.candidates if c.feasible and c.shape == first.shape}
    assert set(by_qos) == {"normal", "low"}
    key = shape_key(first.shape)
    starts: dict[SchedulerKey, datetime] = {
        ("q", "cpu", "proj", "normal", key): NOW + timedelta(hours=3),
        ("q", "cpu", "proj2", "low", key): NOW + timedelta(minutes=1),
    }
    second = place(job, PlacementInputs(snap, {"q": qos}, Policy(), now=NOW, estimates=starts))
    assert isinstance(second, Placement)
    waits = {
        c.qos: c.estimates.wait_s
        for c in second.trace.candidates
        if c.feasible and c.shape == first.shape and c.estimates is not None
    }
    assert waits == {"normal": 3 * 3600, "low": 60}
    assert (second.account, second.qos) == ("proj2", "low")


async def test_answers_for_two_qos_on_one_partition_and_shape_are_not_merged() -> None:
    beta = WillRun(NOW, slow=("normal",))
    answer = await ask_scheduler(
        [_req_for("beta", "normal"), _req_for("beta", "low")], {"beta": _adapter(BETA, beta)}
    )
    assert answer.starts == {
        _req_for("beta", "normal").key: NOW + timedelta(hours=3),
        _req_for("beta", "low").key: NOW,
    }


class Garbage:
    """A channel that answers every batched section with `line` (exit 0), and `sacct` with
    rows no Slurm writes: a start past year 9999 and node counts that are not numbers."""

    def __init__(self, line: str) -> None:
        self.line = line

    async def run(self, command: Command) -> CommandResult:
        script = command.stdin or ""
        names = re.findall(rf"echo '{BATCH_MARK} begin (\w+)'", script)
        if not names:  # sacct --parsable2: JobID|State|...|AllocTRES|JobName
            t = int(NOW.timestamp())
            rows = [
                f"1|COMPLETED|proj|cpu|{t}|{t}|99999999999999999999|{t}|5|0:0|cpu=4,node=1|a",
                f"2|COMPLETED|proj|cpu|{t}|{t}|{t + 60}|{t + 90}|30|0:0|cpu=4,node=x|b",
            ]
            return CommandResult(0, "\n".join(rows) + "\n", "")
        out = []
        for name in names:
            out += [f"{BATCH_MARK} begin {name}", self.line, f"{BATCH_MARK} end {name} 0"]
        return CommandResult(0, "\n".join(out) + "\n", "")

    async def aclose(self) -> None:
        return None


async def test_a_garbage_estimate_or_accounting_answer_is_that_sites_alone(store: Store) -> None:
    """A start time no clock holds, or no estimate at all: that site has none and says why; the
    other site's answer stands, the decision still places, and reading the user's accounting
    keeps the other site's jobs."""
    huge = "sbatch: Job 7 to start at 99999999999999999999 using 4 processors on nodes n1 in"
    for line in (f"{huge} partition cpu", "\x00\xff not slurm at all"):
        beta = WillRun(NOW + timedelta(minutes=5))
        adapters = {"alpha": _adapter(ALPHA, Garbage(line)), "beta": _adapter(BETA, beta)}
        answer = await ask_scheduler([_req_for("alpha"), _req_for("beta")], adapters)
        assert answer.starts == {_req_for("beta").key: NOW + timedelta(minutes=5)}
        assert set(answer.notes) == {"alpha"}
        assert answer.notes["alpha"].isprintable()  # it reaches the agent in the trace
    clock = Clock()
    o = _orchestrator(store, clock, alpha=ALPHA, beta=BETA)
    o.collector.latest["alpha"] = state(ALPHA.profile)
    o.collector.latest["beta"] = state(BETA.profile)
    o.adapters.update(
        alpha=_adapter(ALPHA, Garbage(f"{huge} partition cpu")),
        beta=_adapter(BETA, WillRun(NOW + timedelta(hours=1))),
    )
    task = TaskRecord(
        id="t1", request=_req(envelope=env(cpus=4)), idempotency_key="k", created_at=NOW
    )
    decision = await o.planner.decide(task)
    assert isinstance(decision, Placement), decision
    assert "alpha: no start for 1 of 1" in decision.trace.estimates_note
    beta_c = next(c for c in decision.trace.candidates if c.site == "beta" and c.feasible)
    assert beta_c.estimates is not None and beta_c.estimates.wait_source.startswith("scheduler")

    class Sacct(WillRun):
        async def run(self, command: Command) -> CommandResult:
            if command.argv[0] != "sacct":
                return await super().run(command)
            t = int(NOW.timestamp())
            row = f"3|COMPLETED|proj|cpu|{t}|{t}|{t + 120}|{t + 180}|60|0:0|cpu=4,node=1|c"
            return CommandResult(0, row + "\n", "")

    o.adapters["beta"] = _adapter(BETA, Sacct(NOW))
    kept = await o.waits.learn_from_accounting(force=True)
    assert kept == 1 and [w.wait_s for w in o.waits.user_waits["beta"]] == [120.0]
    assert "alpha" not in o.waits.user_waits


class Accounting:
    """`sacct` for the user's jobs as Slurm answers it: the rows given, each call's window kept."""

    def __init__(self, rows: list[str]) -> None:
        self.rows = rows
        self.windows: list[str] = []

    async def run(self, command: Command) -> CommandResult:
        assert command.argv[0] == "sacct", command.argv
        self.windows += [a.split("=", 1)[1] for a in command.argv if a.startswith("--starttime")]
        return CommandResult(0, "".join(r + "\n" for r in self.rows), "")

    async def aclose(self) -> None:
        return None


def _row(job: int, start: datetime, wait_s: int, name: str = "analysis") -> str:
    t = int(start.timestamp())
    sub = t - wait_s
    return f"{job}|COMPLETED|proj|cpu|{sub}|{sub}|{t}|{t + 60}|60|0:0|cpu=4,node=1|{name}"


async def test_accounting_is_read_whole_once_then_only_since_the_last_read(store: Store) -> None:
    """The first read asks for the whole learned window; the next one (ACCOUNTING_EVERY_S
    later) only for the jobs active since the last read, less the overlap. A job in both reads
    is one observation; fedhpc's own jobs are passed over before their fields are read (a
    garbage row of one does not cost the site its accounting)."""
    clock = Clock()
    o = _orchestrator(store, clock, beta=BETA)
    o.collector.latest["beta"] = state(BETA.profile)
    own = "tabc123-7-1"
    sacct = Accounting(
        [
            _row(1, NOW - timedelta(hours=2), 100),
            f"2|COMPLETED|proj|cpu|not-a-time|x|y|z|w|0:0|cpu=4|fedhpc-{own}",
        ]
    )
    o.adapters["beta"] = _adapter(BETA, sacct)
    assert await o.waits.learn_from_accounting(force=True) == 1
    window = int(Policy().settings.learned_window_s)
    assert sacct.windows == [f"now-{window}seconds"]

    clock.now = NOW + timedelta(seconds=ACCOUNTING_EVERY_S)
    # Job 1 again; jobs 3 and 4 alike in all but their ids (a sweep's: same shape, same second).
    sacct.rows = [_row(1, NOW - timedelta(hours=2), 100), _row(3, NOW, 30), _row(4, NOW, 30)]
    assert await o.waits.learn_from_accounting(force=True) == 3
    assert sacct.windows[1] == f"now-{int(ACCOUNTING_EVERY_S) + ACCOUNTING_OVERLAP_S}seconds"
    assert sorted(w.wait_s for w in o.waits.user_waits["beta"]) == [30.0, 30.0, 100.0]
