"""Hold-back under per-user scheduler limits: a task whose only obstacle is the user's job
limit on its partitions (`max_jobs_per_user`, a center's MaxSubmit) or the site's cap on the
user's pending jobs (`max_pending_per_user`) waits in fedhpc, `queued` with the reason, and is
placed when the user's jobs there start or finish: it is never sent to a scheduler that would
refuse it, and never declared unschedulable for it."""

from __future__ import annotations

import hashlib
import json

from fedhpc.collector.service import Collector
from fedhpc.orchestrator.records import TaskRecord
from fedhpc.placement import Category, Outcome, Unschedulable
from fedhpc.placement.context import Ledger, user_pending_at

__all__ = ["HOLD_PREFIX", "as_submitted", "held_by_limits", "hold_key", "hold_reason"]

HOLD_PREFIX = "queued: held back by your per-user job limit"


def held_by_limits(collector: Collector, u: Unschedulable, ledger: Ledger | None) -> list[str]:
    """`site/partition: n of limit jobs` for each partition whose candidates failed only
    because the user's jobs there (the last probe's count plus jobs fedhpc sent since) reached
    its `max_jobs_per_user`, `site: n of cap pending jobs` for each site whose pending jobs
    reached its `max_pending_per_user`; empty when another obstacle rules every candidate out."""
    out: dict[str, str] = {}
    for c in u.trace.candidates:
        key = f"{c.site}/{c.partition}"
        if c.feasible or key in out or c.site in out or c.site not in collector.sites:
            continue
        fails = [r.category for r in c.rules if r.outcome is Outcome.FAIL]
        if not fails or any(f is not Category.USER_LIMITS for f in fails):
            continue
        profile = collector.sites[c.site].profile
        state = collector.latest.get(c.site)
        cap = profile.max_pending_per_user
        if cap is not None and state is not None:
            pending = user_pending_at(c.site, state, ledger)
            if pending >= cap:
                out[c.site] = f"{c.site}: {pending} of {cap} pending jobs"
                continue
        spec = next((p for p in profile.partitions if p.name == c.partition), None)
        pstate = state.partition(c.partition) if state is not None else None
        if spec is None or spec.max_jobs_per_user is None or pstate is None:
            continue
        jobs = pstate.user_pending_jobs + pstate.user_running_jobs
        jobs += ledger.jobs.get((c.site, c.partition), 0) if ledger else 0
        if jobs >= spec.max_jobs_per_user:  # else the QoS part of the rule failed: not a hold
            out[key] = f"{key}: {jobs} of {spec.max_jobs_per_user} jobs"
    return sorted(out.values())


def hold_reason(limits: list[str]) -> str:
    """The task's decision line while it is held: readable by a person and an agent."""
    when = "start or finish" if any(x.endswith(" pending jobs") for x in limits) else "finish"
    return (
        f"{HOLD_PREFIX} ({'; '.join(limits)}); fedhpc submits it as your jobs there "
        f"{when}, oldest first (nothing to do)"
    )


def hold_key(task: TaskRecord) -> str:
    """Tasks that a per-user limit holds alike: a group's children as submitted (the group
    id), or tasks asking the same thing in the same way (`~` and a digest of the request's
    placement inputs): single tasks, and a child that replan changed (its own exclusions or
    envelope), which is never held under its unchanged siblings' reason. Once one is held in
    a placement pass, the others wait with it."""
    if task.group_id is not None and as_submitted(task):
        return task.group_id
    r = task.request
    inputs = [
        r.envelope.model_dump(mode="json"),
        str(r.policy),
        r.fixed_site,
        r.fallback,
        r.workdir,
        sorted(o for o in r.outputs if o.startswith("/")),  # they pin sites like workdir
        r.task_budget,
        sorted(task.excluded_sites),
        sorted(task.refused_sites),
        task.group_id,
    ]
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode())
    return "~" + digest.hexdigest()[:24]


def as_submitted(task: TaskRecord) -> bool:
    """A group child whose request replan never changed and no scheduler refused (the store's
    `AS_SUBMITTED` test): its siblings as submitted ask exactly the same."""
    return task.reopened == 0 and not task.excluded_sites and not task.refused_sites
