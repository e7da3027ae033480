"""The daemon's wait estimates at the I/O edge: the schedulers' own start estimates for a
decision's top candidates (`ask`, `prefetch`), each estimator's recent error (`errors`), and the
user's jobs in every partition from the schedulers' accounting (`learn_from_accounting`), which
the learned estimator learns from next to fedhpc's own attempts. Placement stays pure: all of
this reaches `place()` as arguments."""

from __future__ import annotations

import re
from datetime import datetime
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import anyio
import structlog

from fedhpc.adapters.command import Command, CommandResult
from fedhpc.domain.job import AccountingRecord
from fedhpc.errors import FedError
from fedhpc.orchestrator.records import AttemptRecord, TaskRecord
from fedhpc.orchestrator.start_estimates import SchedulerAnswer, ask_scheduler, requests_from_trace
from fedhpc.placement import (
    Ledger,
    Placement,
    Policy,
    SchedulerKey,
    Unschedulable,
    WaitObservation,
)
from fedhpc.placement.errors import ErrorObservation, EstimatorErrors
from fedhpc.placement.estimators import WaitHistory
from fedhpc.placement.policy import PolicyKind, WaitMethod

if TYPE_CHECKING:
    from fedhpc.orchestrator.service import Orchestrator

__all__ = [
    "ACCOUNTING_EVERY_S",
    "ask",
    "asks_scheduler",
    "errors",
    "fresh",
    "learn_from_accounting",
    "prefetch",
    "user_waits",
]

log = structlog.get_logger(__name__)

ACCOUNTING_EVERY_S = 300.0  # the user's jobs are read from each site's accounting this often


def asks_scheduler(policy: Policy) -> bool:
    """Whether a decision under `policy` uses the schedulers' estimates (auto, scheduler)."""
    return policy.kind is not PolicyKind.SHORTEST_QUEUE and policy.wait in (
        WaitMethod.AUTO, WaitMethod.SCHEDULER)  # fmt: skip


def fresh(
    o: Orchestrator, answer: SchedulerAnswer
) -> tuple[dict[SchedulerKey, datetime], dict[str, str]]:
    """The answers not older than a job fedhpc placed on their partition since, and the notes
    (per site: why some candidates have none)."""
    starts = {}
    notes = dict(answer.notes)
    for key, start in answer.starts.items():
        placed = o.placed_at.get(key[:2])
        if placed is not None and placed >= answer.asked_at.get(key, 0.0):
            notes.setdefault(key[0], "asked before fedhpc placed a job on that partition")
            continue
        starts[key] = start
    return starts, notes


async def ask(o: Orchestrator, firsts: list[Placement | Unschedulable]) -> SchedulerAnswer:
    """The schedulers' start estimates for the top candidates of first (pure) passes: one
    batched remote call per site, all sites at once, answers reused within the cycle. Sites
    known to be offline are not asked."""
    reqs = [r for f in firsts if isinstance(f, Placement) for r in requests_from_trace(f.trace)]
    skip = {s: "offline (its last probe failed)" for s in o.sites if o.offline(s)}
    return await ask_scheduler(reqs, o.adapters, timeout_s=o.estimate_timeout_s,
                               cache=o.estimates, skip=skip)  # fmt: skip


async def prefetch(
    o: Orchestrator, tasks: list[TaskRecord], *, history: WaitHistory | None, ledger: Ledger | None
) -> SchedulerAnswer | None:
    """One scheduler answer for a batch of tasks (a group's children): their first passes'
    top candidates, asked together, one call per site."""
    waits = history if history is not None else await o.wait_history()
    plans = []
    seen: set[str] = set()
    for task in tasks:
        sig = task.request.envelope.model_dump_json() + repr(task.excluded_sites)
        if sig in seen:
            continue  # children of one template: one first pass for all
        seen.add(sig)
        attempt, avoid, policy = o.plan(task, exclude=(), wall_s=None, waits=waits, ledger=ledger)
        if asks_scheduler(policy):
            plans.append((attempt, avoid))
    if not plans:
        return None

    def first_passes() -> list[Placement | Unschedulable]:
        return [attempt(avoid, None) for attempt, avoid in plans]

    return await ask(o, await anyio.to_thread.run_sync(first_passes))


async def errors(o: Orchestrator) -> EstimatorErrors:
    """Each estimator's recent error per site and partition: the waits predicted when jobs
    were placed against the waits accounting reported. Built once per control cycle."""
    if o.estimator_errors is None:
        obs = []
        for row in await o.store.finished_attempts():
            a = AttemptRecord.from_row(row)
            if a.wait_s is None or a.started_at is None:
                continue
            for method, predicted in a.predicted_waits.items():
                obs.append(ErrorObservation(a.site, a.partition, method, predicted, a.wait_s,
                                            a.started_at))  # fmt: skip
        s = Policy().settings
        o.estimator_errors = EstimatorErrors(obs, now=o.clock(), window_s=s.learned_window_s,
                                             min_samples=s.learned_min_samples)  # fmt: skip
    return o.estimator_errors


@runtime_checkable
class _UserJobs(Protocol):
    def user_jobs_command(self, user: str, since_s: int) -> Command: ...

    def parse_accounting(
        self, result: CommandResult, *, now: datetime | None = None
    ) -> list[AccountingRecord]: ...


# fedhpc's own jobs (`records.job_name`): their waits come from its attempts already.
_OURS = re.compile(r"fedhpc-t[0-9a-f]+-[0-9]+")


def _observation(site: str, r: AccountingRecord) -> WaitObservation | None:
    """A started job's wait (start - eligible, else - submit) at its size, or None."""
    base = r.eligible or r.submit
    if r.start is None or base is None or not r.partition or r.array_index is not None:
        return None
    if r.name and _OURS.fullmatch(r.name):
        return None
    tres = r.alloc_tres
    nodes = max(int(tres.get("node", "1") or 1), 1)
    gpus = int(tres.get("gres/gpu", "0") or 0)
    cpus = max(int(tres.get("cpu", "1") or 1), 1)
    wait = max(0.0, (r.start - base).total_seconds())
    return WaitObservation(site=site, partition=r.partition, gpus=gpus // nodes,
                           cpus=max(cpus // nodes, 1), nodes=nodes, wait_s=min(wait, 1e8),
                           observed_at=r.start)  # fmt: skip


async def learn_from_accounting(o: Orchestrator, *, force: bool = False) -> int:
    """Read every job of the user that started in the learned window from each online site's
    accounting (one `sacct` per site, at most every ACCOUNTING_EVERY_S; sites in parallel,
    bounded in time). fedhpc's own jobs are among them. Returns the observations kept."""
    window = int(Policy().settings.learned_window_s)
    now = anyio.current_time()
    due = [
        s for s, a in sorted(o.adapters.items())
        if isinstance(a.dialect, _UserJobs) and o.online(s)
        and (force or now - o.accounting_read.get(s, -1e18) >= ACCOUNTING_EVERY_S)
    ]  # fmt: skip

    async def one(site: str) -> None:
        adapter = o.adapters[site]
        dialect = adapter.dialect
        assert isinstance(dialect, _UserJobs)
        o.accounting_read[site] = now
        command = dialect.user_jobs_command(adapter.login, window)
        try:
            with anyio.fail_after(o.estimate_timeout_s * 5):
                result = await adapter.transport.run(command)
            records = dialect.parse_accounting(result)
        except (FedError, TimeoutError, ValueError) as exc:
            # Any typed error is this site's alone (a login that needs a person, a refused
            # transport setting): raised in the task group it would cancel every other site.
            log.info("user accounting unavailable", site=site, error=str(exc)[:200])
            return
        obs = [x for r in records if (x := _observation(site, r)) is not None]
        o.user_waits[site] = obs

    async with anyio.create_task_group() as tg:
        for site in due:
            tg.start_soon(one, site, name=f"user-accounting:{site}")
    if due:
        o.new_cycle()  # the learned index is rebuilt with them
    return sum(len(v) for v in o.user_waits.values())


def user_waits(o: Orchestrator) -> list[WaitObservation]:
    """The user's jobs' waits from accounting, every site."""
    return [w for site in sorted(o.user_waits) for w in o.user_waits[site]]
