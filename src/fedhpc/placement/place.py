"""`place`: envelope x snapshot x sites x policy -> Placement | Unschedulable, with a full trace.

What does not depend on the request is indexed once per snapshot (`prune.federation_index`).
Before anything is scored, partitions that fail a rule whatever the shape are pruned by class
(site policy, architecture, accelerator, hardware too small for the envelope's minimum, wall-time
cap, containers, health, freshness); the rest are scored in the order of a lower bound on their
best sort key, and scoring stops once no remaining partition can enter the best `top`. The
trace ranks those exactly as a full evaluation would and reports the pruned partitions by
class, with the reason. An unschedulable decision evaluates every partition, as before."""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence

from fedhpc.domain.envelope import ResourceEnvelope
from fedhpc.domain.units import as_utc
from fedhpc.placement.bounds import Bounds
from fedhpc.placement.context import PartitionContext
from fedhpc.placement.credit import Budgets
from fedhpc.placement.estimators import (
    RuntimeModel,
    SchedulerEstimates,
    WaitHistory,
)
from fedhpc.placement.evaluate import Evaluated, Inputs, Known, evaluate, minimum_shape, rebudget
from fedhpc.placement.hints import relax_hint
from fedhpc.placement.inputs import PlacementInputs
from fedhpc.placement.normalize import normalize_envelope
from fedhpc.placement.policy import Goal, Policy, PolicyKind
from fedhpc.placement.prune import (
    Entry,
    context,
    dominated,
    federation_index,
    live_of,
    prune_static,
)
from fedhpc.placement.ranking import KEY_TAIL, primary_fields
from fedhpc.placement.rules import RuleResult
from fedhpc.placement.trace import (
    CandidateReasons,
    CandidateTrace,
    DecisionTrace,
    Placement,
    PrunedClass,
    Unschedulable,
)

__all__ = ["Request", "place"]

Bound = tuple[float | int | str, ...]
# What an evaluation read that a group's claims change: the partition's own claims, the site's
# spending, the site's scheduler-estimate note.
Seen = tuple[int, int, str | None]


def _estimates_note(
    feasible: Sequence[CandidateTrace],
    estimates: SchedulerEstimates | None,
    notes: Mapping[str, str] | None,
) -> str:
    """Which estimate ranked the candidates, in one line: how many feasible candidates had the
    scheduler's own, and per site why the others did not."""
    if estimates is None and notes is None:
        return ""
    n = sum(1 for c in feasible if c.estimates and c.estimates.wait_source.startswith("scheduler"))
    parts = [f"scheduler estimates for {n} of {len(feasible)} feasible candidates"]
    parts += [f"{site}: {why}" for site, why in sorted((notes or {}).items())]
    return "; ".join(parts)


class Request:
    """One envelope's decisions against one snapshot: what `place` computes once per request
    (normalized envelope, runtime model, the pruning) and every partition's evaluation, which
    a group's later children reuse while the ledger leaves that partition unchanged."""

    def __init__(self, envelope: ResourceEnvelope, inputs: PlacementInputs) -> None:
        sites, ledger, task_budget = inputs.sites, inputs.ledger, inputs.task_budget
        estimates, estimate_notes = inputs.estimates, inputs.estimate_notes
        environment = inputs.environment
        history, prune, top = inputs.history, inputs.prune, inputs.top
        self.policy = policy = inputs.policy or Policy()
        s = policy.settings
        self.now = now = as_utc(inputs.now)  # a naive clock is UTC, never a TypeError
        self.env = env = normalize_envelope(
            # A preferred partition a site no longer has is only a soft preference that no
            # longer applies here; intake refused unknown ones (orchestrator.door).
            envelope,
            (x.profile for x in sites.values()),
            sites=sites.keys(),
            partitions={},
        )
        if environment is None and env.container is not None:
            environment = env.container.image
        waits = (
            history
            if isinstance(history, WaitHistory)
            else (WaitHistory(history, now=now, settings=s) if history else None)
        )
        model = RuntimeModel.build(env, inputs.runtime, inputs.runtime_history, s)
        self.fixed = (
            policy.site if policy.kind is PolicyKind.FIXED_SITE and not policy.fallback else None
        )
        self.snapshot, self.sites, self.ledger, self.task_budget = (
            inputs.snapshot,
            sites,
            ledger,
            task_budget,
        )
        self.minimum = minimum_shape(env)
        self.refused, self.suspect = inputs.person_refused, inputs.suspect
        self.estimates, self.notes = estimates, estimate_notes
        self._inputs = (
            policy,
            model,
            waits,
            estimates,
            estimate_notes,
            inputs.errors,
            inputs.env_cache,
            environment,
            self.minimum,
        )
        self._site_results: dict[str, list[tuple[int, RuleResult]]] = {}
        self._partitions: dict[tuple[str, str], Known] = {}
        self.index = federation_index(inputs.snapshot, sites)
        # Budgets per (site, account), kept across a group's children: a claim changes only
        # its own site's (`claimed`). Credit bounds from the probe are shared per snapshot.
        self._budgets = Budgets(
            task_budget, ledger, self.index.allowances, person=inputs.person_budget
        )
        every = list(range(len(self.index.entries)))
        self.survivors, self.static = (
            prune_static(self.index, self._context, self.minimum) if prune else (every, [])
        )
        # The dominance bounds are on completion: a goal that ranks by charge scores all.
        self.top = top if prune and policy.goal is Goal.FASTEST else 0
        self.bounds = Bounds.of(
            policy=policy,
            env=env,
            runtime=model,
            history=waits,
            scheduler=estimates,
            errors=inputs.errors,
            env_cache=inputs.env_cache,
            environment=environment,
        )
        self.score = {self.index.by_name[k] for k in inputs.score if k in self.index.by_name}
        # Per partition: what its evaluation read that a group's claims change, and the result.
        self._memo: dict[int, tuple[Seen, Evaluated]] = {}
        self._order: list[tuple[Bound, int]] | None = None
        self._bounds: dict[int, Bound] = {}  # each survivor's bound in `_order`

    def _context(self, e: Entry) -> PartitionContext:
        return context(
            e,
            env=self.env,
            now=self.now,
            settings=self.policy.settings,
            ledger=self.ledger,
            task_budget=self.task_budget,
            fixed=self.fixed,
            refused=self.refused,
            suspect=self.suspect,
        )

    def _evaluate(self, i: int, inputs: Inputs) -> Evaluated:
        """Partition `i` evaluated, or its evaluation kept from an earlier child while nothing
        it read has changed since. Claims elsewhere on its site change only its budgets: then
        only what reads them is redone (`rebudget`)."""
        e = self.index.entries[i]
        own, spent = self.ledger.fingerprint(e.key) if self.ledger else (0, 0)
        # A scheduler estimate dropped at the site changes how every estimate there reads.
        seen = (own, spent, self.notes.get(e.key[0]) if self.notes else None)
        hit = self._memo.get(i)
        out: Evaluated | None = None
        if hit is not None:
            if hit[0] == seen:
                return hit[1]
            if hit[0][0] == own and hit[0][2] == seen[2]:
                out = rebudget(self._context(e), hit[1], inputs)
        if out is None:
            out = evaluate(self._context(e), inputs)
        self._memo[i] = (seen, out)
        return out

    def _bound(self, i: int) -> Bound:
        e = self.index.entries[i]
        live = live_of(e, self.ledger)
        assert live is not None  # survivors passed the health rule: they have a probe
        return self.bounds.key(e, live, self._budgets)

    def order(self) -> list[tuple[Bound, int]]:
        """The surviving partitions by lower bound (then walk order); kept up to date by
        `claimed` while a group places its children."""
        if self._order is None:
            if self.top:
                self._bounds = {i: self._bound(i) for i in self.survivors}
            self._order = sorted((self._bounds.get(i, ()), i) for i in self.survivors)
        return self._order

    def claimed(self, site: str, partition: str) -> None:
        """A claim on (site, partition) was added to the ledger: the site's budgets changed,
        and the partition's bound may have grown."""
        self._budgets.claimed(site)
        i = self.index.by_name.get((site, partition))
        if i is None or self._order is None or not self.top:
            return
        order, bounds = self._order, self._bounds
        if i not in bounds:  # not a survivor of this request (another envelope's child)
            return
        pos = bisect.bisect_left(order, (bounds[i], i))
        if pos == len(order) or order[pos][1] != i:  # a bound that does not compare (NaN)
            pos = next(p for p, (_, j) in enumerate(order) if j == i)
        del order[pos]
        bounds[i] = bound = self._bound(i)
        bisect.insort(order, (bound, i))

    def decide(self) -> Placement | Unschedulable:
        policy = self.policy
        inputs = Inputs(*self._inputs, self._budgets, self._site_results, self._partitions)
        feasible: list[CandidateTrace] = []
        rejected: list[CandidateTrace] = []
        best: list[tuple[float | int | str, ...]] = []
        threshold: Bound | None = None
        order = self.order()
        cut = len(order)
        for pos, (bound, i) in enumerate(order):
            if threshold is not None and bound > threshold:
                cut = pos
                break
            ok, bad = self._evaluate(i, inputs)
            feasible.extend(ok)
            rejected.extend(bad)
            if ok and self.top:
                best.extend(c.key for c in ok if c.key is not None)
                best.sort()
                del best[self.top :]
                if len(best) == self.top:
                    threshold = best[-1]
        left = [i for _, i in order[cut:]]
        for i in (i for i in left if i in self.score):  # asked for by the caller: scored anyway
            ok, bad = self._evaluate(i, inputs)
            feasible.extend(ok)
            rejected.extend(bad)
        pruned: list[PrunedClass] = list(self.static)
        if not feasible:
            # Nothing fits: every partition is evaluated, so the reasons and the hint speak
            # for each candidate as they always have.
            done = set(self.survivors)
            for i in range(len(self.index.entries)):
                if i not in done:
                    ok, bad = self._evaluate(i, inputs)
                    rejected.extend(bad)
            pruned = []
        elif left:
            assert threshold is not None
            entries = self.index.entries
            ids = (entries[i].id for i in left if i not in self.score)
            pruned.append(dominated(ids, threshold, policy))
        return self._decision(feasible, rejected, pruned)

    def _decision(
        self,
        feasible: list[CandidateTrace],
        rejected: list[CandidateTrace],
        pruned: list[PrunedClass],
    ) -> Placement | Unschedulable:
        policy, env = self.policy, self.env
        feasible.sort(key=lambda c: c.key or ())
        rejected.sort(key=lambda c: c.id)
        chosen = feasible[0] if feasible else None
        trace = DecisionTrace.model_construct(
            now=self.now,
            snapshot_at=self.snapshot.taken_at,
            policy=policy,
            envelope=env,
            key_fields=(*primary_fields(policy), *KEY_TAIL),
            candidates=(*feasible, *rejected),
            chosen=chosen.id if chosen else None,
            feasible=len(feasible),
            estimates_note=_estimates_note(feasible, self.estimates, self.notes),
            pruned=tuple(pruned),
            ranked=self.top if pruned else 0,
        )
        if chosen is None:
            # A fixed site's own reasons first: the others only say the policy excludes them.
            fixed = self.fixed
            first = sorted(rejected, key=lambda c: c.site != fixed) if fixed else rejected
            reasons = tuple(CandidateReasons(c.id, tuple(c.failures())) for c in first)
            return Unschedulable.model_construct(
                state="unschedulable",
                hint=relax_hint(env, rejected, self.sites),
                reasons=reasons,
                trace=trace,
            )
        assert chosen.estimates is not None
        return Placement.model_construct(
            state="placed",
            candidate_id=chosen.id,
            site=chosen.site,
            partition=chosen.partition,
            account=chosen.account,
            qos=chosen.qos,
            shape=chosen.shape,
            estimates=chosen.estimates,
            trace=trace,
        )


def place(envelope: ResourceEnvelope, inputs: PlacementInputs) -> Placement | Unschedulable:
    """Place one task. Pure and deterministic: the same arguments give the same decision and
    trace whatever the order of sites, partitions or accounts in them. Raises `ValidationFailed`
    for an invalid envelope; an impossible one is `Unschedulable`, never an exception. What
    each input means: `PlacementInputs`."""
    return Request(envelope, inputs).decide()
