"""get_result's answer: a task's manifest (state, attempts, provenance, its outputs with sizes)
and bounded tails of its output, read from the site where its current attempt ran; brief
after a resume."""

from __future__ import annotations

from collections.abc import Mapping

from fedhpc.adapters.site import SiteAdapter
from fedhpc.collector import Collector
from fedhpc.domain.job import JobState
from fedhpc.globus_auth.people import acting_for
from fedhpc.ops.hints import unreadable_hint
from fedhpc.ops.task_views import AttemptView, OutputRef, ResultManifest
from fedhpc.ops.tasks import ResultRequest
from fedhpc.orchestrator import staging
from fedhpc.orchestrator.book import TaskBook
from fedhpc.orchestrator.dispatch import outside_roots
from fedhpc.orchestrator.liveness import offline, online
from fedhpc.orchestrator.records import AttemptRecord, TaskRecord

__all__ = ["current_attempt", "result_manifest", "unreadable_now"]


def current_attempt(atts: list[AttemptRecord], task: TaskRecord) -> AttemptRecord | None:
    """The attempt a task's answers show: the accepted one, else the live one (a hedged
    task's: the one that started, else the first), else the last."""
    if task.accepted_attempt is not None:
        return next((a for a in atts if a.n == task.accepted_attempt), None)
    live = [a for a in atts if not a.superseded]
    going = [a for a in live if not a.state.terminal]
    if len(going) > 1:  # hedged copies: the one that started, else the first (book's rule)
        return next((a for a in going if a.state is JobState.RUNNING), going[0])
    return live[-1] if live else (atts[-1] if atts else None)


def _tail_streams(req: ResultRequest, state: JobState) -> tuple[str, ...]:
    """stdout (or the stream asked for), plus stderr when the task did not complete."""
    if req.preview == "none":
        return ()
    first = req.preview or "stdout"
    failed = state in {JobState.FAILED, JobState.TIMEOUT, JobState.CANCELLED}
    return (first, "stderr") if failed and first == "stdout" else (first,)


# Ended states whose answer points at the output (the hints' _READ): when it cannot be read,
# get_result's own `next` says why.
_READABLE_ENDS = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.TIMEOUT})


def _round(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 1)


def _brief(m: ResultManifest, tails: dict[str, tuple[str, bool]]) -> ResultManifest:
    """What an agent needs after a resume, without what it has or can derive: no timestamps,
    shapes or job names per attempt, no provenance (the submit answer had the decision), and
    no reference to an output whose whole content is in a tail or that is empty. A task's
    only job, in the task's state and without a reason of its own, is flattened into the
    answer (its number and state would repeat the task's)."""
    site = next((a.site for a in reversed(m.attempts) if not a.superseded), None)
    shown = {k for k, (_, cut) in tails.items() if not cut}
    outputs = tuple(
        o.model_copy(update={"site": None if o.site == site else o.site})
        for o in m.outputs
        if not (o.kind in shown or (o.kind != "artifact" and o.bytes == 0))
    )
    attempts = tuple(
        AttemptView(
            n=a.n,
            site=a.site,
            partition=a.partition,
            state=a.state,
            job_id=a.job_id,
            reason=a.reason,
            superseded=a.superseded,
            wait_s=_round(a.wait_s),
            runtime_s=_round(a.runtime_s),
            exit_code=a.exit_code,
        )
        for a in m.attempts
    )
    brief = {"attempts": attempts, "outputs": outputs, "provenance": None, "created_at": None}
    return m.model_copy(update=brief | _flat(m, attempts))


def _flat(m: ResultManifest, attempts: tuple[AttemptView, ...]) -> dict[str, object]:
    """The brief answer's fields for a task whose one job is where the task is, else {}."""
    if len(attempts) != 1:
        return {}
    a = attempts[0]
    if a.superseded or a.reason or a.state is not m.state:
        return {}
    return {
        "attempts": (),
        "site": a.site,
        "partition": a.partition,
        "job_id": a.job_id,
        "wait_s": a.wait_s,
        "runtime_s": a.runtime_s,
        "exit_code": a.exit_code,
    }


async def result_manifest(
    task: TaskRecord,
    req: ResultRequest,
    *,
    book: TaskBook,
    collector: Collector,
    adapters: Mapping[str, SiteAdapter],
) -> ResultManifest:
    """The manifest: state, attempts, provenance, output references with sizes, and bounded
    tails (the last bytes, where errors are) of stdout and, after a failure, of stderr."""
    atts = await book.load_attempts(task.id)
    cur = current_attempt(atts, task)
    outputs: list[OutputRef] = []
    tails: dict[str, tuple[str, bool]] = {}
    ran = cur is not None and cur.job_id is not None
    why = unreadable_now(collector, adapters, cur.site) if cur is not None and ran else ""
    unreadable = cur.site if cur is not None and why else None
    if cur is not None and ran and unreadable is None:
        adapter = adapters[cur.site]
        files: list[tuple[str, str]] = [
            ("stdout", cur.stdout or ""),
            ("stderr", cur.stderr or ""),
        ]
        files += [
            ("artifact", f"{cur.workdir}/{p}" if not p.startswith("/") else p)
            for p in task.request.outputs
        ]
        files = [(k, p) for k, p in files if p]
        # A task stored before outputs were confined: a path outside the roots is not read.
        hidden = outside_roots(adapter, task.request.outputs)
        with acting_for(task.owner):  # a per-person site reads as the task's person
            sizes = await adapter.file_sizes([p for _, p in files if p not in hidden])
        outputs = [OutputRef(kind=k, site=cur.site, path=p, bytes=sizes.get(p)) for k, p in files]
        for stream in _tail_streams(req, task.state):
            path = cur.stdout if stream == "stdout" else cur.stderr
            if path and sizes.get(path):
                with acting_for(task.owner):
                    tails[stream] = await adapter.tail(path, req.max_bytes)
    first = "stderr" if req.preview == "stderr" else "stdout"
    preview, truncated = tails.get(first, (None, False))
    extra = tails["stderr"][0] if first == "stdout" and "stderr" in tails else None
    manifest = ResultManifest(
        task_id=task.id,
        name=task.request.name,
        state=task.state,
        group_id=task.group_id,
        created_at=task.created_at,
        attempts=tuple(a.view() for a in atts),
        provenance=task.provenance,
        outputs=tuple(outputs),
        preview=preview,
        truncated=truncated,
        stderr=extra,
        reasons=task.reasons,
        waiting=(task.decision or None) if task.state is JobState.QUEUED else None,
        data=await staging.data_provenance(book.store, task),
        unreadable=unreadable,
    )
    if unreadable is not None and task.state in _READABLE_ENDS:
        read = f"get_result(task_id={task.id!r})"
        hint = unreadable_hint(task.state.value, unreadable, why, read)
        manifest = manifest.model_copy(update={"next": hint})
    return _brief(manifest, tails) if req.brief else manifest


def unreadable_now(collector: Collector, adapters: Mapping[str, SiteAdapter], site: str) -> str:
    """Why a site's files cannot be read now ("" = they can): "unknown" (no longer in
    config.toml), "offline" (the last probe found it down), "unprobed" (not probed yet
    since the daemon started)."""
    if site not in adapters:
        return "unknown"
    if offline(collector, site):
        return "offline"
    return "" if online(collector, site) else "unprobed"
