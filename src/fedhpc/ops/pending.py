"""Why a task at a scheduler has not started, and when fedhpc predicted it would (pure)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from fedhpc.domain.job import JobState
from fedhpc.ops.task_views import AttemptView, ResultManifest

__all__ = [
    "REASONS",
    "pending_note",
    "predicted_start_at",
    "predicted_wait",
    "shown_utc",
    "waiting_copies",
]

# What the common pending reasons mean (squeue(1) "JOB REASON CODES"; the process sites use
# the same two first). A reason not listed here is quoted as the scheduler gave it.
REASONS = {
    "Priority": "jobs of higher priority are ahead in this partition",
    "Resources": "next in line, waiting for nodes to free up",
    "Dependency": "waiting for a job it depends on",
    "BeginTime": "its earliest start time has not come",
    "JobHeldUser": "held by its user",
    "JobHeldAdmin": "held by an administrator",
    "ReqNodeNotAvail": "a node it needs is down, drained or reserved",
    "Reservation": "waiting for its reservation",
    "PartitionTimeLimit": "its wall time exceeds the partition's limit",
    "PartitionDown": "the partition is down",
}
_LIMIT_PREFIXES = ("QOS", "Assoc", "MaxJobs", "MaxCpu", "MaxGRES")

# The placement's one-line decision says which wait it predicted and whose estimate it was:
# "devanvil/ai (fastest): est. wait 60s (scheduler) + run ..." (orchestrator/planner.summary);
# the source may go on ("learned:partition (n=12); no scheduler estimate: ...").
_EST = re.compile(r"est\. wait (\d+(?:\.\d+)?)s \((.*?)\) \+ run")
_BY = {"scheduler": "the scheduler's estimate", "learned": "learned from past waits"}


def predicted_wait(decision: str) -> tuple[float, str] | None:
    """The queue wait placement predicted (seconds) and, in words, whose estimate it was."""
    found = _EST.search(decision)
    if found is None:
        return None
    method = re.split(r"[:;( ]", found.group(2), maxsplit=1)[0]
    return float(found.group(1)), _BY.get(method, "from the queue it saw")


def _meaning(reason: str) -> str:
    gloss = REASONS.get(reason)
    if gloss is None and reason.startswith(_LIMIT_PREFIXES):
        gloss = "a limit of its account or QOS holds it"
    return f"{reason} ({gloss})" if gloss else reason


def _span(seconds: float) -> str:
    s = max(0, round(seconds))
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    return f"{s // 3600} h {s % 3600 // 60} min"


_WAITING = (JobState.SUBMITTED, JobState.PENDING)


def _waiting_attempt(m: ResultManifest) -> AttemptView | None:
    """The attempt the task waits on: its newest in play; of hedged copies all waiting, the
    first (the one its decision placed; the others are named beside it)."""
    live = [a for a in m.attempts if not a.superseded]
    waiting = [a for a in live if a.state in _WAITING and a.started_at is None]
    if len(waiting) > 1 and len(waiting) == len([a for a in live if not a.state.terminal]):
        return waiting[0]
    a = live[-1] if live else None
    if a is None or a.started_at is not None:
        return None
    return a if a.state in _WAITING else None


def waiting_copies(m: ResultManifest) -> list[AttemptView]:
    """The attempts the task waits on: the one `pending_note` names first, then the task's
    other hedged copies in play that wait too (none for a task that is not hedged)."""
    a = _waiting_attempt(m)
    if a is None:
        return []
    others = [
        x
        for x in m.attempts
        if x.n != a.n and not x.superseded and x.state in _WAITING and x.started_at is None
    ]
    return [a, *others]


def _predicted(m: ResultManifest, a: AttemptView, *, main: bool) -> tuple[float, str] | None:
    """The wait placement predicted for `a` and whose estimate it was: the task's decision's
    for the attempt the task waits on first (`main`) unless that is a hedged copy; a copy's
    own (each copy was placed on its own site)."""
    if a.copy_of is not None or not main:
        if a.predicted_wait_s is None:
            return None
        return a.predicted_wait_s, "its copy's placement"
    return predicted_wait(m.provenance.decision) if m.provenance else None


def predicted_start_at(m: ResultManifest, a: AttemptView, *, main: bool = True) -> datetime | None:
    """When placement predicted `a` would start (UTC): its submission plus its predicted wait
    (`main`: `a` is the attempt the task waits on first, `waiting_copies`)."""
    est = _predicted(m, a, main=main)
    if est is None or a.submitted_at is None:
        return None
    since = a.submitted_at.astimezone(UTC)
    return datetime.fromtimestamp(since.timestamp() + est[0], UTC)


def shown_utc(t: datetime) -> str:
    """A time as the sentence prints it: `2026-12-04 22:01:00 UTC`."""
    return f"{t.astimezone(UTC).strftime('%Y-%m-%d %H:%M:%S')} UTC"


def _copies(m: ResultManifest, a: AttemptView) -> str:
    """ "; hedged: also pending at ..." for the task's other copies waiting, each with its job
    and the start predicted for it, else ""."""
    others = waiting_copies(m)[1:]
    if not others:
        return ""

    def one(x: AttemptView) -> str:
        start = predicted_start_at(m, x, main=False)
        facts = ([f"job {x.job_id}"] if x.job_id else []) + (
            [f"start about {shown_utc(start)}"] if start is not None else []
        )
        return f"{x.site}/{x.partition}" + (f" ({', '.join(facts)})" if facts else "")

    where = ", ".join(one(x) for x in others)
    return f"; hedged: also pending at {where}, the first to start runs, the others are cancelled"


def pending_note(m: ResultManifest, now: datetime) -> str | None:
    """One sentence for a task handed to a scheduler that has not started: where it waits and
    since when, the scheduler's pending reason (with what it means), and the wait placement
    predicted with the start that gives (and how late it is). None for any other task, and
    for one that already says why it waits (`waiting`: fedhpc's own hold)."""
    if m.waiting or m.state not in (JobState.SUBMITTED, JobState.PENDING):
        return None
    a = _waiting_attempt(m)
    if a is None:
        return None
    parts = [
        f"pending in {a.site}/{a.partition}'s queue" + (f" (job {a.job_id})" if a.job_id else "")
    ]
    since = a.submitted_at.astimezone(UTC) if a.submitted_at else None
    if since is not None:
        parts[0] += f" for {_span((now - since).total_seconds())}"
    parts[0] += _copies(m, a)
    parts.append(
        f"scheduler's reason: {_meaning(a.reason)}"
        if a.reason
        else "no reason from the scheduler yet"
    )
    est = _predicted(m, a, main=True)
    start = predicted_start_at(m, a)
    if est is not None and start is not None:
        wait_s, source = est
        late = (now - start).total_seconds()
        parts.append(
            f"fedhpc predicted a {_span(wait_s)} wait ({source}): start about "
            f"{shown_utc(start)}" + (f", {_span(late)} late" if late >= 1 else "")
        )
    return "; ".join(parts)
