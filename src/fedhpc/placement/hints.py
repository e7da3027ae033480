"""What to relax when nothing is feasible: the rule whose removal would free the most candidates."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from fedhpc.domain.config import Site
from fedhpc.domain.envelope import ResourceEnvelope
from fedhpc.placement.rules import Category, Outcome
from fedhpc.placement.trace import CandidateTrace

__all__ = ["relax_hint"]


def _largest_accelerator(sites: Mapping[str, Site]) -> str:
    best: tuple[float, str] = (0.0, "none")
    for name in sorted(sites):
        for part in sites[name].profile.partitions:
            acc = part.node.accelerator
            if acc is not None and acc.memory_gib > best[0]:
                best = (acc.memory_gib, f"{acc.type} at {name}/{part.name}")
    return f"{best[0]:g} GiB ({best[1]})"


def _advice(
    cat: Category,
    env: ResourceEnvelope,
    sites: Mapping[str, Site],
    reason: str = "",
    *,
    alone: bool = True,
) -> str:
    """What to relax for `cat`; `reason` is the example's (a rule's reason) where it matters.
    `alone`: `cat` is all these candidates fail on (else their other rules fail too, and an
    offline site's coming back would not place the task: a queued task does not wait then)."""
    if cat is Category.ACCELERATOR:
        if env.min_accelerator_memory_gib:
            return (
                f"lower min_accelerator_memory_gib ({env.min_accelerator_memory_gib:g}); the "
                f"largest accelerator is {_largest_accelerator(sites)}"
            )
        return "allow more accelerator_types, or change the GPU range"
    if cat is Category.CAPACITY:
        return "lower the minimum GPUs, CPUs, memory or nodes per job"
    if cat is Category.WALL_TIME:
        return (
            "lower wall_time.min or split the task into shorter steps (if the predicted "
            "runtime is what exceeds it: raise wall_time.max, or allow more GPUs/CPUs)"
        )
    if cat is Category.CREDIT and "per-person budget" in reason:
        return (
            "your share of the site's allocation is spent: wait for your running jobs to end, "
            "shorten wall_time.max / the shape, or ask the operator to raise person_budget"
        )
    if cat is Category.CREDIT:
        return "raise the budget in your config or shorten wall_time.max / the shape"
    if cat is Category.AUTHORIZATION and "sign in to fedhpc again" in reason:
        return (
            "these sites run each person's work as that person, and your sign-in gave fedhpc "
            "no usable authorization there: sign in to fedhpc again through your MCP client, "
            "granting Globus Compute (or ask the operator which sites you may use)"
        )
    if cat is Category.AUTHORIZATION:
        return "add an account for these sites and partitions in your config"
    if cat is Category.HEALTH and " is offline: " in reason and not alone:
        return (
            "the site is offline, and its candidates fail other rules too: its answering "
            "again would not place the task, so relax those (see reasons)"
        )
    if cat is Category.HEALTH and " is offline: " in reason:
        return (
            "wait for the site: a queued task waits while only offline sites could run it, "
            "and is placed when one answers again"
        )
    if cat in (Category.HEALTH, Category.FRESHNESS):
        return "refresh the snapshot, or wait until the site answers again"
    if cat is Category.SITE_POLICY:
        return "widen sites_include / sites_exclude, or use a policy that allows more sites"
    if cat is Category.ARCHITECTURE:
        return "allow more architectures"
    if cat is Category.CONTAINER:
        return "allow another container runtime, or run without a container"
    return "wait for some of your jobs to finish, or use another QoS"


def relax_hint(
    env: ResourceEnvelope, rejected: Sequence[CandidateTrace], sites: Mapping[str, Site]
) -> str:
    """One sentence: which rule blocks most, what relaxing it would open up, and an example."""
    if not rejected:
        return "no site or partition is enabled: enable a site in your config"
    sole: Counter[Category] = Counter()
    anyf: Counter[Category] = Counter()
    example: dict[Category, str] = {}
    for c in rejected:
        fails = [r for r in c.rules if r.outcome is Outcome.FAIL]
        for r in fails:
            anyf[r.category] += 1
            example.setdefault(r.category, f"{c.id}: {r.reason}")
        if len(fails) == 1:
            sole[fails[0].category] += 1
    order = list(Category)
    if sole:
        # Every category that alone blocks some candidate, most candidates first.
        cats = sorted(sole, key=lambda k: (-sole[k], order.index(k)))[:3]
        parts = [
            f"{sole[c]} of {len(rejected)} candidates fail only on {c.value}: "
            f"{_advice(c, env, sites, example[c])} (e.g. {example[c]})"
            for c in cats
        ]
        return "; ".join(parts)
    cat = min(anyf, key=lambda k: (-anyf[k], order.index(k)))
    return (
        f"every candidate fails more than one rule; most often {cat.value} "
        f"({anyf[cat]} of {len(rejected)}): {_advice(cat, env, sites, example[cat], alone=False)} "
        f"(e.g. {example[cat]})"
    )
