"""Decisions: where a task should run now, from the live snapshot, the wait estimators' inputs
(`WaitInputs`) and the claims the snapshot cannot show yet (a `Ledger`). Placement itself is
pure CPU work (`placement.place`); this module gathers its inputs and asks the schedulers."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

import anyio

from fedhpc.collector import Collector
from fedhpc.domain.config import Site
from fedhpc.domain.envelope import DraftSource, ResourceEnvelope
from fedhpc.domain.site import ResourceSnapshot
from fedhpc.ops.task_views import Provenance
from fedhpc.orchestrator import workdirs
from fedhpc.orchestrator.estimates import WaitInputs, asks_scheduler
from fedhpc.orchestrator.people import refused_sites
from fedhpc.orchestrator.records import TaskRecord
from fedhpc.orchestrator.start_estimates import SchedulerAnswer
from fedhpc.orchestrator.suspect_sites import SuspectSites, place_avoiding
from fedhpc.placement import (
    Goal,
    Ledger,
    Placement,
    PlacementInputs,
    Policy,
    PolicyKind,
    Unschedulable,
    place,
)
from fedhpc.placement.errors import EstimatorErrors
from fedhpc.placement.estimators import WaitHistory
from fedhpc.placement.spend import ledger_rows, spent_per_site

__all__ = ["Planner", "brief", "provenance", "summary"]

# A person's newest attempts read for their spending (as GET /v1/ledger reads them).
PERSON_ATTEMPTS = 20_000
Attempt = Callable[[tuple[str, ...], SchedulerAnswer | None], Placement | Unschedulable]


def _pruned(p: Placement) -> str:
    n = p.trace.pruned_partitions()
    return f" ({n} partitions pruned by class, unscored)" if n else ""


def summary(p: Placement) -> str:
    """The decision in one line: where, under which policy, and the estimates behind it (the
    provenance's: `fedhpc task`, the dashboard, the task resource)."""
    e = p.estimates
    return (
        workdirs.fallback_note(p)
        + f"{p.site}/{p.partition} ({_policy(p)}): est. wait {e.wait_s:.0f}s "
        f"({e.wait_source}) + run {e.runtime_s:.0f}s, charge {e.charge:.3g} {e.charge_unit}; "
        f"{p.trace.feasible} feasible of "
        f"{len(p.trace.candidates)} candidates" + _pruned(p)
    )


def brief(p: Placement) -> str:
    """The decision as an agent reads it beside the answer's site and partition: the policy
    when not the default, the estimates and whose wait estimate it is, the charge. The whole
    line (the source's detail, the candidates) is the provenance's `summary`."""
    e = p.estimates
    policy = _policy(p)
    head = "" if policy == PolicyKind.BEST_FEASIBLE.value else f"{policy}: "
    source = e.wait_source.split(";", 1)[0].strip()
    return (
        workdirs.fallback_note(p)
        + f"{head}est. wait {e.wait_s:.0f}s ({source}) + run {e.runtime_s:.0f}s, "
        f"{e.charge:.3g} {e.charge_unit}"
    )


def _policy(p: Placement) -> str:
    """The policy, and the goal where it ranked (best-feasible, other than fastest)."""
    policy, goal = p.trace.policy, p.trace.policy.goal
    if policy.kind is not PolicyKind.BEST_FEASIBLE or goal is Goal.FASTEST:
        return policy.kind.value
    return f"{policy.kind.value}, {goal.value}"


def provenance(env: ResourceEnvelope, p: Placement, note: str = "") -> Provenance:
    """Where the envelope came from and the whole decision (`note`: the hedge's, if any)."""
    draft = env.draft
    return Provenance(
        envelope_source=(draft.source if draft else DraftSource.USER).value,
        rationale=draft.rationale if draft else "",
        confidence=draft.confidence if draft else None,
        policy=p.trace.policy.kind.value,
        decision=summary(p) + (f"; {note}" if note else ""),
        candidates=len(p.trace.candidates),
        feasible=p.trace.feasible,
        pruned=p.trace.pruned_partitions(),
    )


class Planner:
    """Places tasks on the collector's live view. Counts the jobs placed per site in the
    current control cycle: at most `submits_per_cycle` new jobs go to one site in a cycle."""

    def __init__(
        self,
        collector: Collector,
        waits: WaitInputs,
        *,
        clock: Callable[[], datetime],
        submits_per_cycle: int,
        default_goal: Goal = Goal.FASTEST,
        suspect_hold_s: float = 30.0,
    ) -> None:
        self.collector = collector
        self.default_goal = default_goal  # the user config's `goal`: for requests naming none
        self.waits = waits
        self.clock = clock
        # Good citizenship: at most this many new jobs placed for one site per control cycle
        # (retries and re-placements of live work are not counted); the rest wait a cycle.
        self.submits_per_cycle = submits_per_cycle
        self.placed_this_cycle: Counter[str] = Counter()
        # Service mode: per person, per site, what their work there used or holds (the ledger
        # read at the first of their tasks in a placement pass, plus what the pass placed).
        self._people: dict[str, dict[str, float]] = {}
        # Per person: the per-person sites they hold no authorization for, read once a pass.
        self._refused: dict[str, dict[str, str]] = {}
        self.suspects = SuspectSites(clock, hold_s=suspect_hold_s)  # avoided while others fit

    @property
    def sites(self) -> dict[str, Site]:
        return self.collector.sites

    def full(self) -> tuple[str, ...]:
        """Sites that took this cycle's bound of submissions."""
        return tuple(
            sorted(s for s, n in self.placed_this_cycle.items() if n >= self.submits_per_cycle)
        )

    def placed(self, task: TaskRecord, p: Placement) -> None:
        """`task`'s new job goes to (site, partition) in this cycle."""
        self.placed_this_cycle[p.site] += 1
        self.waits.mark_placed(p.site, p.partition, p.shape, task.id)
        spent = self._people.get(task.owner or "")
        if spent is not None:
            spent[p.site] = spent.get(p.site, 0.0) + p.estimates.charge

    def new_pass(self) -> None:
        """A placement pass starts: every earlier placement is in the store, so each person's
        spending is read again there (once, at their first task of the pass)."""
        self._people.clear()
        self._refused.clear()

    async def _load_person(self, owner: str | None) -> None:
        """What `owner`'s work used and holds per site, read once per pass; only when a site
        caps a person's spending (`person_budget`). And where they may not run at all."""
        if owner is not None and owner not in self._refused:
            self._refused[owner] = await refused_sites(owner, self.sites)
        if owner is None or owner in self._people:
            return
        if all(s.user.person_budget is None for s in self.sites.values()):
            return
        attempts = await self.collector.store.owned_attempts(owner, PERSON_ATTEMPTS)
        spent = spent_per_site(ledger_rows(attempts, self.sites, states=self.collector.latest))
        self._people[owner] = {site: u + c for site, (u, c) in spent.items()}

    def _person_budget(self, task: TaskRecord) -> dict[str, tuple[float, str]] | None:
        """Per site that caps a person's spending: what the task's owner may still spend
        there, and the bound as the trace names it (None for a task nobody signed in for)."""
        if task.owner is None:
            return None
        spent = self._people.get(task.owner, {})
        out: dict[str, tuple[float, str]] = {}
        for name, site in self.sites.items():
            cap = site.user.person_budget
            if cap is None:
                continue
            used = round(spent.get(name, 0.0), 4)
            why = (
                f"per-person budget {cap:g} - {used:g} your jobs there used or hold "
                f"(sites.{name}.person_budget)"
            )
            out[name] = (cap - used, why)
        return out or None

    def envelope(
        self, task: TaskRecord, exclude: tuple[str, ...] = (), wall_s: int | None = None
    ) -> tuple[ResourceEnvelope, tuple[str, ...]]:
        """The task's envelope (with a longer wall time if asked) and the sites it must not
        use: excluded by it, by the caller or earlier rejections, unable to hold its
        absolute workdir or outputs, or any but the one its stage-in copied its inputs to
        (whatever an include says, and a site added to the federation since too)."""
        req = task.request
        env = req.envelope
        if wall_s is not None:
            hi = max(wall_s, env.wall_time.upper)
            env = env.model_copy(
                update={"wall_time": env.wall_time.model_copy(update={"min": wall_s, "max": hi})}
            )
        known = set(self.sites)
        # absolute workdir and outputs
        cannot_hold = workdirs.sites_without_all((req.workdir, *req.outputs), self.sites)
        # An include never brings back a site the caller, an earlier rejection or a refusal
        # ruled out (a retry or a hedged copy elsewhere must go elsewhere), nor a site that
        # cannot hold the task's paths or is not its inputs' site.
        drop = tuple(
            sorted(
                (
                    set(env.sites_exclude)
                    | set(exclude)
                    | set(task.excluded_sites)
                    | set(task.refused_sites)
                )
                & known
                | cannot_hold
                | (known - {task.data_site} if task.data_site else set())
            )
        )
        return env, drop

    def inputs(
        self,
        task: TaskRecord,
        *,
        history: WaitHistory | None,
        ledger: Ledger | None,
        errors: EstimatorErrors | None,
        score: tuple[tuple[str, str], ...] = (),
    ) -> PlacementInputs:
        """`place()`'s inputs for `task` now: the live snapshot, the task's policy and credit
        bound, the wait estimators' inputs and the caller's ledger (scheduler answers are
        added per attempt: `WaitInputs.fresh`)."""
        req = task.request
        snapshot = ResourceSnapshot(taken_at=self.clock(), sites=dict(self.collector.latest))
        policy = Policy(
            kind=req.policy,
            site=req.fixed_site,
            fallback=req.fallback,
            goal=req.goal or req.envelope.preferences.goal or self.default_goal,
        )
        return PlacementInputs(
            snapshot,
            self.sites,
            policy,
            now=self.clock(),
            history=history or (),
            errors=errors,
            task_budget=req.task_budget,
            person_budget=self._person_budget(task),
            person_refused=self._refused.get(task.owner) if task.owner else None,
            ledger=ledger,
            score=score,
        )

    def plan(
        self,
        task: TaskRecord,
        *,
        exclude: tuple[str, ...],
        wall_s: int | None,
        waits: WaitHistory | None,
        ledger: Ledger | None,
        errors: EstimatorErrors | None = None,
        score: tuple[tuple[str, str], ...] = (),
    ) -> tuple[Attempt, tuple[str, ...], Policy]:
        """How to place `task` now: a pure function of (sites to avoid, scheduler answers),
        the soft avoid list (siblings' sites, suspect sites), and the policy."""
        env, drop = self.envelope(task, exclude, wall_s)
        known = set(self.sites)
        inputs = self.inputs(task, history=waits, ledger=ledger, errors=errors, score=score)
        suspects = self.suspects.now()

        def attempt(
            avoid: tuple[str, ...], answer: SchedulerAnswer | None
        ) -> Placement | Unschedulable:
            doubt = {s: why for s, why in suspects.items() if s in avoid}  # named as suspect
            out = tuple(sorted(set(drop) | set(avoid) - set(doubt)))
            starts, notes = self.waits.fresh(answer) if answer else (None, None)
            got = replace(inputs, estimates=starts, estimate_notes=notes, suspect=doubt or None)
            return place(env.model_copy(update={"sites_exclude": out}), got)

        avoid = () if task.spread_relaxed else tuple(s for s in task.avoid_sites if s in known)
        if set(avoid) >= known - set(drop):
            avoid = ()  # every usable system already has a sibling: spreading cannot help
        avoid = tuple(sorted({*avoid, *(known & set(suspects))}))
        return attempt, avoid, inputs.policy or Policy()

    async def decide(
        self,
        task: TaskRecord,
        *,
        exclude: tuple[str, ...] = (),
        wall_s: int | None = None,
        history: WaitHistory | None = None,
        ledger: Ledger | None = None,
        answer: SchedulerAnswer | None = None,
        score: tuple[tuple[str, str], ...] = (),
    ) -> Placement | Unschedulable:
        """Place `task` on the live snapshot, without excluded sites, avoiding siblings' sites
        (soft: dropped when nothing else fits). A batch passes its `history`, `ledger` and the
        schedulers' `answer` for all its tasks; alone, the top candidates of a first pass are
        asked here (`WaitInputs.ask`). `score` names partitions to score even when they cannot
        rank (where a job already waits)."""
        waits = history if history is not None else await self.waits.history()
        await self._load_person(task.owner)
        attempt, avoid, policy = self.plan(
            task,
            exclude=exclude,
            wall_s=wall_s,
            waits=waits,
            ledger=ledger,
            errors=await self.waits.errors(),
            score=score,
        )
        # Placement is pure CPU work (a batch places dozens of tasks without an await between
        # them): a worker thread keeps the event loop serving inspect_federation meanwhile.
        if answer is None and asks_scheduler(policy):
            first = await anyio.to_thread.run_sync(attempt, avoid, None)
            if not isinstance(first, Placement) and avoid:
                first = await anyio.to_thread.run_sync(attempt, (), None)
            if not isinstance(first, Placement):
                return first  # no feasible candidate: nothing to ask about
            answer = await self.waits.ask([first])
        decision = await anyio.to_thread.run_sync(attempt, avoid, answer)
        if avoid and isinstance(decision, Unschedulable):
            decision = await anyio.to_thread.run_sync(attempt, (), answer)
        return decision

    async def decide_children(
        self,
        tasks: list[TaskRecord],
        *,
        history: WaitHistory | None,
        ledger: Ledger,
        answer: SchedulerAnswer | None,
    ) -> list[Placement | Unschedulable]:
        """Children of one group with the same request (`batching.child_key`), placed in one
        pass (`place_group`): each sees the earlier ones' claims, which `ledger` receives, no
        scheduler answer on a partition an earlier one took, and no site that reached its
        submissions for this cycle (as `decide` one by one). Not for spread groups: each child
        there avoids its siblings' systems."""
        first = tasks[0]
        await self._load_person(first.owner)
        env, drop = self.envelope(first, self.full())
        env = env.model_copy(update={"sites_exclude": drop})
        # The per-site bound on submissions per control cycle, as `decide` one by one has it.
        caps = {s: self.submits_per_cycle - self.placed_this_cycle[s] for s in self.sites}
        starts, notes = self.waits.fresh(answer) if answer else (None, None)
        inputs = self.inputs(
            first, history=history, ledger=ledger, errors=await self.waits.errors()
        )
        inputs = replace(inputs, estimates=starts, estimate_notes=notes)

        def run() -> list[Placement | Unschedulable]:
            return place_avoiding([env] * len(tasks), inputs, caps, self.suspects.now())

        # Pure CPU work: a worker thread keeps the event loop serving meanwhile (as `decide`).
        return await anyio.to_thread.run_sync(run)

    async def prefetch(
        self, tasks: list[TaskRecord], *, history: WaitHistory | None, ledger: Ledger | None
    ) -> SchedulerAnswer | None:
        """One scheduler answer for a batch of tasks (a group's children): their first passes'
        top candidates, asked together, one call per site."""
        waits = history if history is not None else await self.waits.history()
        plans = []
        seen: set[str] = set()
        for task in tasks:
            sig = task.request.envelope.model_dump_json() + repr(
                (task.excluded_sites, task.refused_sites)
            )
            if sig in seen:
                continue  # children of one template: one first pass for all
            seen.add(sig)
            attempt, avoid, policy = self.plan(
                task, exclude=(), wall_s=None, waits=waits, ledger=ledger
            )
            if asks_scheduler(policy):
                plans.append((attempt, avoid))
        if not plans:
            return None

        def first_passes() -> list[Placement | Unschedulable]:
            return [attempt(avoid, None) for attempt, avoid in plans]

        return await self.waits.ask(await anyio.to_thread.run_sync(first_passes))
