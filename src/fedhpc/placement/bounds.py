"""Lower bounds on the best sort key a partition's candidates can reach, for one request: what
lets placement leave unscored the partitions that cannot enter the ranking its trace shows.
Each part of the bound is at most the candidates' own, so comparing it as the key is compared
never prunes a candidate that could rank."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from fedhpc.domain.envelope import ResourceEnvelope
from fedhpc.domain.job import Shape
from fedhpc.domain.site import PartitionSpec
from fedhpc.placement.context import Live
from fedhpc.placement.credit import Budgets, predict_charge
from fedhpc.placement.errors import EstimatorErrors
from fedhpc.placement.estimators import (
    EnvCache,
    RuntimeModel,
    SchedulerEstimates,
    WaitHistory,
    env_prep_s,
)
from fedhpc.placement.policy import Objective, Policy, PolicyKind, Settings, WaitMethod
from fedhpc.placement.prune import Entry
from fedhpc.placement.ranking import preference_rank, whole_seconds
from fedhpc.placement.sizing import gpus_nodes

__all__ = ["Bounds"]

_ASKS = frozenset({WaitMethod.SCHEDULER, WaitMethod.AUTO})  # methods using scheduler estimates
_LEARNS = frozenset({WaitMethod.LEARNED, WaitMethod.AUTO})  # methods using the learned index


@dataclass(frozen=True, slots=True)
class Bounds:
    """What one request needs to bound a partition's best sort key from below."""

    policy: Policy
    env: ResourceEnvelope
    runtime: RuntimeModel
    history: WaitHistory | None
    scheduled: frozenset[tuple[str, str]]  # (site, partition) with a scheduler estimate
    errors: EstimatorErrors | None  # with `auto`, may prefer paper where learned answers
    env_cache: EnvCache | None
    environment: str | None
    # Read for every partition, so worked out once from the policy and the envelope.
    p90: bool  # the objective ranks by the p90 completion
    asks: bool  # the wait method uses scheduler estimates
    learns: bool  # the wait method uses the learned index
    prefer_paper: bool  # `auto` with recent errors: paper may replace learned anywhere
    prefers: bool  # the envelope lists preferred sites or partitions
    nodes: int | None  # when every shape has exactly this many nodes
    # Per feasibility class: the most units sizing can grant, and the shortest runtime.
    spec_bounds: dict[int, tuple[tuple[int, int, int], float]] = field(default_factory=dict)
    prep: dict[str, float] = field(default_factory=dict)  # environment preparation per site
    # The cheapest charge per (feasibility class, charge model by identity, nodes).
    charges: dict[tuple[int, int, int], float] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        *,
        policy: Policy,
        env: ResourceEnvelope,
        runtime: RuntimeModel,
        history: WaitHistory | None,
        scheduler: SchedulerEstimates | None,
        errors: EstimatorErrors | None,
        env_cache: EnvCache | None,
        environment: str | None,
    ) -> Bounds:
        scheduled = frozenset((k[0], k[1]) for k in scheduler) if scheduler else frozenset()
        method, pref = policy.wait, env.preferences
        return cls(
            policy,
            env,
            runtime,
            history,
            scheduled,
            errors,
            env_cache,
            environment,
            p90=policy.objective is Objective.P90,
            asks=method in _ASKS,
            learns=method in _LEARNS,
            prefer_paper=errors is not None and method is WaitMethod.AUTO,
            prefers=bool(pref.sites or pref.partitions),
            nodes=env.nodes.min if env.nodes.min == env.nodes.upper else None,
        )

    def key(
        self,
        e: Entry,
        live: Live,
        budgets: Budgets,
    ) -> tuple[float | int | str, ...]:
        """A lower bound on the sort key of every candidate of `p`, compared as the key is:
        each part at most the candidates' own (the primary criterion, the credit fraction at
        the cheapest shape and the roomiest account, no waste, the exact preference ranks, the
        first account, the empty id), for a partition with `live` state (its health passed).
        `budgets`: each (site, account)'s budget as the request's ledger stands."""
        prefs = (
            preference_rank(self.env.preferences, e.site.name, e.spec.name)
            if self.prefers
            else (0, 0)
        )
        spec = self._spec(e)
        fraction = budgets.least_fraction(e.site, e.state, e.accounts, self._charge(e, live))
        return (*self._primary(e, live, spec), fraction, 0, *prefs, 0, "")

    def _charge(self, e: Entry, live: Live) -> float:
        """The cheapest charge of any shape here: the envelope's minimum GPUs and CPUs on as
        many nodes as the fewest any shape gets (the paper shape's; the others have the
        largest shape's), for the partition's wall time."""
        env = self.env
        nodes = self.nodes if self.nodes is not None else gpus_nodes(env, e.spec, live)[1]
        model = e.site.profile.charge_for(e.spec)
        key = (e.klass, id(model), nodes)
        hit = self.charges.get(key)
        if hit is None:
            spec = e.spec
            wall = max(env.wall_time.min, min(env.wall_time.upper, spec.max_wall_s))
            cheapest = Shape.model_construct(
                nodes=nodes,
                cpus=env.cpus.min,
                gpus=env.gpus.min,
                memory_mib=0,
                wall_time_s=wall,
                accelerator_type=None,
            )
            hit = self.charges[key] = predict_charge(e.site.profile, spec, cheapest).amount
        return hit

    def _primary(
        self, e: Entry, live: Live, spec: tuple[tuple[int, int, int], float]
    ) -> tuple[float | int, ...]:
        policy = self.policy
        if policy.kind is PolicyKind.SHORTEST_QUEUE:
            return (live.pending,)
        s = policy.settings
        site, part = e.site.name, e.spec.name
        p90 = self.p90
        if self.asks and self.scheduled and (site, part) in self.scheduled:
            wait = 0.0  # the scheduler may predict a start now
        else:
            learned = self._learned(site, part, spec[0], p90)
            # Some shape would use the paper estimate: no learned answer, or the recent errors
            # may make `auto` prefer paper there.
            if learned is None or learned[1] or self.prefer_paper:
                paper = self._paper(e.spec, live, s) * (s.uncertainty_factor if p90 else 1.0)
                wait = paper if learned is None else min(paper, learned[0])
            else:
                wait = learned[0]
        prep = self.prep.get(site)
        if prep is None:
            prep = self.prep[site] = env_prep_s(site, self.environment, self.env_cache, s)[0]
        completion = whole_seconds(round(wait + spec[1] + prep, 3))
        if self.policy.kind is PolicyKind.FIXED_SITE:
            return (0 if site == self.policy.site else 1, completion)
        return (completion,)

    def _learned(
        self, site: str, part: str, most: tuple[int, int, int], p90: bool
    ) -> tuple[float, bool] | None:
        """The least learned wait any shape here can get, and whether some shape gets none;
        None when the method does not learn or nothing was observed."""
        if self.history is None or not self.learns:
            return None
        env = self.env
        g, c, n = most
        least, gap = math.inf, False
        if g >= 1:
            lo = max(env.gpus.min, 1) * env.nodes.min
            t, q, none = self.history.floor(site, part, "gpu", lo, g * n)
            least, gap = min(least, q if p90 else t), gap or none
        if env.gpus.min == 0:
            t, q, none = self.history.floor(site, part, "cpu", env.cpus.min * env.nodes.min, c * n)
            least, gap = min(least, q if p90 else t), gap or none
        return least, gap

    def _spec(self, e: Entry) -> tuple[tuple[int, int, int], float]:
        hit = self.spec_bounds.get(e.klass)
        if hit is None:
            most = self._most(e.spec)
            hit = self.spec_bounds[e.klass] = (most, self._runtime(most))
        return hit

    def _most(self, spec: PartitionSpec) -> tuple[int, int, int]:
        """The most GPUs and CPUs per node, and nodes, that sizing can grant here."""
        env, node = self.env, spec.node
        g_lim = node.accelerator.count if node.accelerator else 0
        n_lim = min(spec.max_nodes_per_job, node.count)
        g = max(env.gpus.min, min(env.gpus.upper, g_lim))
        c = max(env.cpus.min, min(env.cpus.upper, node.cpus))
        n = max(
            env.nodes.min, min(env.nodes.upper, n_lim), min(spec.min_nodes_per_job, env.nodes.upper)
        )
        return g, c, n

    def _paper(self, spec: PartitionSpec, live: Live, s: Settings) -> float:
        """The paper estimate's floor over every shape sizing can give this partition: the
        queue-depth wait when not even the envelope's minimum finds a free slot."""
        env = self.env
        if env.gpus.min > 0:
            unit, free, per_node = env.gpus.min, live.free_gpus, live.max_free_gpus_on_node
        elif spec.node.accelerator is None:
            unit, free, per_node = env.cpus.min, live.free_cpus, live.max_free_cpus_on_node
        else:
            return s.dispatch_s  # a CPU-or-GPU shape: slots of either kind may be free
        slots = free // unit if per_node >= unit else 0
        if slots >= env.nodes.min:
            return s.dispatch_s
        return s.dispatch_s + (live.pending + 1) * s.per_pending_s

    def _runtime(self, most: tuple[int, int, int]) -> float:
        """The shortest runtime any shape here can be predicted: at the most units sizing can
        grant (each dimension at most its envelope maximum within the hardware)."""
        m = self.runtime
        g, c, n = most
        # A GPU shape counts GPUs; a CPU shape (only when the envelope allows no GPU) CPUs.
        units = max(g * n, c * n if self.env.gpus.min == 0 else 0, 1)
        r = m.serial_s + m.parallel_s / units
        if m.cap_s is not None:
            r = min(r, m.cap_s)
        if m.exact:
            r = min(r, *m.exact.values())
        return r
