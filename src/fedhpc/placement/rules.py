"""Deterministic feasibility rules: one small function per category, each votes pass/fail/note."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from fedhpc.domain.job import Shape
from fedhpc.domain.site import Health
from fedhpc.domain.units import as_utc
from fedhpc.placement.context import CandidateContext, PartitionContext, user_pending_at

__all__ = [
    "RULES",
    "Category",
    "Level",
    "Outcome",
    "Rule",
    "RuleResult",
    "staleness_bound_s",
    "too_large",
]


class Category(StrEnum):
    """Rule categories, in the order the trace lists them."""

    HEALTH = "health"
    FRESHNESS = "freshness"
    AUTHORIZATION = "authorization"
    SITE_POLICY = "site_policy"
    ARCHITECTURE = "architecture"
    ACCELERATOR = "accelerator"
    CAPACITY = "capacity"
    WALL_TIME = "wall_time"
    CONTAINER = "container"
    USER_LIMITS = "user_limits"
    CREDIT = "credit"


class Outcome(StrEnum):
    PASS = "pass"  # noqa: S105 (an outcome, not a password)
    FAIL = "fail"  # hard: removes the candidate
    NOTE = "note"  # soft: passes, but worth knowing


@dataclass(frozen=True, slots=True)
class RuleResult:
    """One rule's vote on one candidate. A plain dataclass: placement makes thousands per
    second, and pydantic serializes it inside the trace all the same."""

    category: Category
    outcome: Outcome
    reason: str = ""

    @property
    def failed(self) -> bool:
        return self.outcome is Outcome.FAIL


_PASSED = {c: RuleResult(c, Outcome.PASS) for c in Category}


def _ok(cat: Category, reason: str = "") -> RuleResult:
    return RuleResult(cat, Outcome.PASS, reason) if reason else _PASSED[cat]


def _fail(cat: Category, reason: str) -> RuleResult:
    return RuleResult(cat, Outcome.FAIL, reason)


def _note(cat: Category, reason: str) -> RuleResult:
    return RuleResult(cat, Outcome.NOTE, reason)


class Level(StrEnum):
    """What a rule reads, so the engine evaluates it once per partition, account or shape."""

    SITE = "site"
    PARTITION = "partition"
    ACCOUNT = "account"
    SHAPE = "shape"


# ---- partition-level rules -------------------------------------------------------------------


def health(p: PartitionContext) -> RuleResult:
    c = Category.HEALTH
    if p.state is None:
        return _fail(c, f"no probe of {p.site.name} in the snapshot")
    if p.state.health is Health.OFFLINE:
        return _fail(c, f"{p.site.name} is offline: {p.state.error or 'probe failed'}")
    if p.suspect is not None:
        return _fail(c, f"{p.site.name} is suspect: {p.suspect}")
    if p.pstate is None:
        why = f" ({p.state.error})" if p.state.error else ""
        return _fail(c, f"the probe did not report partition {p.spec.name}{why}")
    if not p.pstate.available:
        return _fail(c, f"partition {p.spec.name} is not up")
    if p.state.health is Health.DEGRADED:
        return _note(c, f"{p.site.name} is degraded: {p.state.error or 'partial probe'}")
    return _ok(c)


def staleness_bound_s(p: PartitionContext) -> float:
    s = p.settings
    return max(s.min_staleness_s, s.staleness_factor * p.profile.min_refresh_s)


def freshness(p: PartitionContext) -> RuleResult:
    c = Category.FRESHNESS
    if p.state is None:
        return _note(c, "no probe yet")  # the health rule's reason: one per site
    # Both sides in UTC: a naive time (an old snapshot, a hand-made state) is never a TypeError.
    age = (as_utc(p.now) - as_utc(p.state.collected_at)).total_seconds()
    bound = staleness_bound_s(p)
    if age > bound:
        return _fail(c, f"probe is {age:.0f} s old; the bound is {bound:.0f} s")
    if age < -bound:
        return _fail(c, f"probe is {-age:.0f} s in the future: clock skew")
    if age > 2 * p.profile.min_refresh_s:
        return _note(c, f"probe is {age:.0f} s old")
    return _ok(c, f"{max(age, 0.0):.0f} s old")


def site_policy(p: PartitionContext) -> RuleResult:
    c = Category.SITE_POLICY
    env, site = p.envelope, p.site.name
    if p.spec.name in p.profile.blocked_partitions:
        return _fail(c, f"{p.name} is blocked by the site profile")
    if site in env.sites_exclude:
        return _fail(c, f"the envelope excludes {site}")
    if env.sites_include and site not in env.sites_include:
        return _fail(c, f"the envelope includes only {', '.join(env.sites_include)}")
    if p.fixed_site is not None and site != p.fixed_site:
        return _fail(c, f"the fixed-site policy allows only {p.fixed_site}")
    return _ok(c)


def architecture(p: PartitionContext) -> RuleResult:
    c = Category.ARCHITECTURE
    arch = p.spec.arch or (p.state.arch if p.state and p.state.arch else None) or p.profile.arch
    allowed = p.envelope.architectures
    if allowed and arch not in allowed:
        return _fail(c, f"{p.name} is {arch.value}; the task allows {', '.join(allowed)}")
    return _ok(c)


def accelerator(p: PartitionContext) -> RuleResult:
    c = Category.ACCELERATOR
    env, acc = p.envelope, p.spec.node.accelerator
    if acc is None:
        if env.gpus.min > 0:
            return _fail(c, f"{p.name} has no accelerators; the task needs {env.gpus.min}")
        return _ok(c)
    if env.gpus.upper == 0 and not p.settings.allow_cpu_on_gpu_partitions:
        return _fail(c, f"{p.name} is a {acc.type} partition; a CPU-only task stays off it")
    if env.accelerator_types and not {acc.type, acc.gres_type.lower()} & set(env.accelerator_types):
        return _fail(
            c, f"{p.name} has {acc.type}; the task allows {', '.join(env.accelerator_types)}"
        )
    need = env.min_accelerator_memory_gib
    if need > acc.memory_gib:
        return _fail(c, f"{acc.type} has {acc.memory_gib:g} GiB; the task needs >= {need:g} GiB")
    return _ok(c)


def wall_time(p: PartitionContext) -> RuleResult:
    c = Category.WALL_TIME
    need, cap = p.envelope.wall_time.min, p.spec.max_wall_s
    if need > cap:
        return _fail(c, f"needs >= {need} s; {p.name} caps wall time at {cap} s")
    return _ok(c)


def container(p: PartitionContext) -> RuleResult:
    c = Category.CONTAINER
    req = p.envelope.container
    if req is None:
        return _ok(c)
    have = p.profile.containers.runtimes
    common = [r for r in req.runtimes if r in have]
    if not common:
        return _fail(c, f"{p.site.name} offers {', '.join(have) or 'no container runtime'}")
    return _ok(c, common[0])


# ---- account-level rules ---------------------------------------------------------------------


def authorization(x: CandidateContext) -> RuleResult:
    c, p = Category.AUTHORIZATION, x.part
    site = p.site.name
    if p.refused is not None:  # a per-person site the task's person holds no authorization for
        return _fail(c, p.refused)
    if x.account is None:
        if p.site.user.accounts:
            return _fail(c, f"none of your accounts on {site} covers partition {p.spec.name}")
        if p.state is None or p.state.health is Health.OFFLINE:
            # The probe lists the accounts: without one, they are unknown, not missing. The
            # health rule gives the one true reason (offline, or not probed yet).
            return _note(c, f"accounts unknown until {site} answers a probe")
        if p.profile.conventions.account_required and "accounts" in p.state.unread:
            # Refused or timed out while the rest was read: unknown, and placed once read.
            return _fail(c, f"{site}'s last probe could not read your accounts; asked again")
        if p.profile.conventions.account_required:
            return _fail(c, f"no account known for {site}: add one under sites.{site}.accounts")
        return _ok(c, "no account needed")
    if p.state is not None and p.state.accounts and x.account not in p.state.accounts:
        return _fail(c, f"the scheduler lists no association for account {x.account} on {site}")
    suffix = p.spec.account_suffix
    if suffix and not x.account.endswith(suffix):
        return _fail(c, f"{p.name} takes accounts ending in {suffix!r}, not {x.account}")
    return _ok(c)


def user_limits(x: CandidateContext) -> RuleResult:
    c, p = Category.USER_LIMITS, x.part
    spec = p.spec
    if x.qos is not None and spec.qos and x.qos not in spec.qos:
        return _fail(c, f"QoS {x.qos} is not allowed on {p.name} ({', '.join(spec.qos)})")
    if p.profile.conventions.qos_required and not (x.qos or spec.default_qos or spec.qos):
        return _fail(c, f"{p.site.name} requires a QoS and none is known for {p.name}")
    cap = p.profile.max_pending_per_user
    if cap is not None and p.state is not None:
        pending = user_pending_at(p.site.name, p.state, p.ledger)
        if pending >= cap:
            return _fail(c, f"you have {pending} jobs pending at {p.site.name}; the cap is {cap}")
    limit = spec.max_jobs_per_user
    if limit is not None and p.live is not None and p.live.user_jobs >= limit:
        return _fail(c, f"you have {p.live.user_jobs} jobs on {p.name}; the limit is {limit}")
    if p.live is not None and p.live.user_jobs:
        return _note(c, f"you already have {p.live.user_jobs} jobs on {p.name}")
    return _ok(c)


# ---- shape-level rules -----------------------------------------------------------------------


def too_large(p: PartitionContext, s: Shape) -> RuleResult | None:
    """The capacity rule's checks that a larger shape can only fail too: per-node GPUs, CPUs,
    memory and nodes per job against the partition's hardware. None when `s` fits."""
    c, node, spec = Category.CAPACITY, p.spec.node, p.spec
    acc_count = node.accelerator.count if node.accelerator else 0
    if s.gpus > acc_count:
        return _fail(c, f"needs {s.gpus} GPUs per node; a {p.name} node has {acc_count}")
    if s.cpus > node.cpus:
        return _fail(c, f"needs {s.cpus} CPUs per node; a {p.name} node has {node.cpus}")
    if s.memory_mib > node.memory_mib:
        return _fail(c, f"needs {s.memory_mib} MiB per node; a {p.name} node has {node.memory_mib}")
    most = min(spec.max_nodes_per_job, node.count)
    if s.nodes > most:
        return _fail(c, f"needs {s.nodes} nodes; {p.name} allows {most} per job")
    return None


def capacity(x: CandidateContext) -> RuleResult:
    c, p, s = Category.CAPACITY, x.part, x.shape
    spec = p.spec
    big = too_large(p, s)
    if big is not None:
        return big
    if s.nodes < spec.min_nodes_per_job:
        return _fail(c, f"{p.name} needs at least {spec.min_nodes_per_job} nodes per job")
    if p.live is not None and p.live.usable_nodes == 0:
        return _fail(c, f"{p.name} has no usable node (all down or drained)")
    return _ok(c)


def credit(x: CandidateContext) -> RuleResult:
    c, p = Category.CREDIT, x.part
    charge, budget = x.charge, x.budget
    if budget.unusable is not None:
        return _fail(c, f"cannot check the charge on {p.site.name}: {budget.unusable}")
    if budget.allowed is None:
        return _note(c, f"charge {charge.explain()}; no budget or balance known to check it")
    if charge.amount > budget.allowed:
        return _fail(
            c,
            f"out of credit: predicted charge {charge.explain()} exceeds the "
            f"{budget.allowed:g} {charge.unit} this task may spend on {p.site.name} "
            f"({budget.binding})",
        )
    return _ok(c, f"charge {charge.amount:g} of {budget.allowed:g} {charge.unit}")


@dataclass(frozen=True, slots=True)
class Rule:
    """A table row: the category, what the rule reads, and the function."""

    category: Category
    level: Level
    partition_fn: Callable[[PartitionContext], RuleResult] | None = None
    candidate_fn: Callable[[CandidateContext], RuleResult] | None = None

    def __call__(self, x: CandidateContext) -> RuleResult:
        if self.partition_fn is not None:
            return self.partition_fn(x.part)
        assert self.candidate_fn is not None
        return self.candidate_fn(x)


RULES: tuple[Rule, ...] = (
    Rule(Category.HEALTH, Level.PARTITION, partition_fn=health),
    Rule(Category.FRESHNESS, Level.SITE, partition_fn=freshness),
    Rule(Category.AUTHORIZATION, Level.ACCOUNT, candidate_fn=authorization),
    Rule(Category.SITE_POLICY, Level.PARTITION, partition_fn=site_policy),
    Rule(Category.ARCHITECTURE, Level.PARTITION, partition_fn=architecture),
    Rule(Category.ACCELERATOR, Level.PARTITION, partition_fn=accelerator),
    Rule(Category.CAPACITY, Level.SHAPE, candidate_fn=capacity),
    Rule(Category.WALL_TIME, Level.PARTITION, partition_fn=wall_time),
    Rule(Category.CONTAINER, Level.PARTITION, partition_fn=container),
    Rule(Category.USER_LIMITS, Level.ACCOUNT, candidate_fn=user_limits),
    Rule(Category.CREDIT, Level.SHAPE, candidate_fn=credit),
)
