"""Scheduler start estimates (the I/O side of wait estimator (b)): ask each site's scheduler when
chosen candidates would start.

All `sbatch --test-only` calls for one site go in ONE remote call (`command.batch`); sites run
concurrently, each bounded in time. Answers (and a site's failure) are kept for one control
cycle in an `EstimateCache`, so identical shapes are not asked twice. The result is plain data
that `placement.place` consumes (`PlacementInputs.estimates`, `.estimate_notes`), so placement
itself stays pure and replayable."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable

import anyio
import structlog

from fedhpc.adapters.command import Command, CommandResult, batch, split_batch
from fedhpc.adapters.site import SiteAdapter
from fedhpc.domain.job import JobSpec, Shape
from fedhpc.domain.site import PartitionState
from fedhpc.errors import FedError
from fedhpc.placement.context import shape_key
from fedhpc.placement.estimators import SchedulerKey
from fedhpc.placement.trace import CandidateTrace, DecisionTrace

__all__ = [
    "NO_DRY_RUN",
    "EstimateCache",
    "EstimateRequest",
    "SchedulerAnswer",
    "ask_scheduler",
    "requests_from_trace",
    "scheduler_estimates",
    "still_holds",
]

log = structlog.get_logger(__name__)

# Feed each script to sbatch on stdin inside the batched bash script; sbatch answers on stderr,
# which `batch` discards per section, so fold it into stdout here.
_TEST_ONLY = 'printf "%s" "$1" | sbatch --test-only 2>&1'

# Dialects without a dry-run start estimate, and why (the trace quotes this).
NO_DRY_RUN = {
    "pbs": "PBS Pro has no start-estimate command (qsub has no will-run test)",
    "lsf": "LSF has no start-estimate command (bsub has no will-run test)",
    "process": "local process sites have no scheduler queue to ask",
}

Key = SchedulerKey  # (site, partition, account, qos, shape key): what placement looks up


@dataclass(frozen=True, slots=True)
class EstimateRequest:
    """One candidate to ask the scheduler about."""

    site: str
    partition: str
    account: str | None
    shape: Shape
    qos: str | None = None

    @property
    def key(self) -> Key:
        return (self.site, self.partition, self.account, self.qos, shape_key(self.shape))

    @property
    def cache_key(self) -> Key:
        return self.key


@dataclass(slots=True)
class SchedulerAnswer:
    """What the schedulers said for one decision (or one batch of decisions).

    `starts`: predicted start per candidate key; `asked_at`: when each was asked (monotonic
    seconds), so an answer that predates a job fedhpc placed there since can be dropped;
    `shapes`: the shape each was asked for; `notes`: per site, why some or all of its
    candidates have no estimate; `calls`: remote calls made for this answer (cache hits cost
    none)."""

    starts: dict[Key, datetime] = field(default_factory=dict)
    asked_at: dict[Key, float] = field(default_factory=dict)
    shapes: dict[Key, Shape] = field(default_factory=dict)  # what each start was asked for
    notes: dict[str, str] = field(default_factory=dict)
    calls: int = 0
    hits: int = 0

    def take(self, req: EstimateRequest, start: datetime | None, at: float) -> None:
        """A start for `req` asked at `at` (the first one per candidate is kept)."""
        if start is not None and req.key not in self.starts:
            self.starts[req.key], self.asked_at[req.key] = start, at
            self.shapes[req.key] = req.shape


@runtime_checkable
class _TestOnly(Protocol):
    def test_only_command(self, script: str) -> Command: ...

    def parse_test_only(self, result: CommandResult) -> object: ...


class EstimateCache:
    """Answers within one control cycle: a shape asked once is not asked again until `ttl_s`
    has passed; a site that failed (timeout, transport error) is not asked again either, so a
    hung site costs one timeout per cycle, not one per decision, and a site that keeps failing
    is asked less often still (the pause doubles per failure in a row, up to 8 cycles)."""

    MAX_BACKOFF = 8

    def __init__(self, ttl_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.clock = clock
        # cache key -> (start or None when the scheduler refused that shape, asked at)
        self._answers: dict[
            tuple[str, str, str | None, str | None, str], tuple[datetime | None, float]
        ] = {}
        self._failed: dict[str, tuple[str, float]] = {}  # site -> (why, until)
        self._streak: dict[str, int] = {}  # site -> failures in a row
        self.calls = 0  # remote calls made in all (for benchmarks and status)

    def _fresh(self, at: float) -> bool:
        return self.clock() - at < self.ttl_s

    def get(self, req: EstimateRequest) -> tuple[datetime | None, float] | None:
        hit = self._answers.get(req.cache_key)
        return hit if hit is not None and self._fresh(hit[1]) else None

    def failed(self, site: str) -> str | None:
        hit = self._failed.get(site)
        return hit[0] if hit is not None and self.clock() < hit[1] else None

    def put(self, req: EstimateRequest, start: datetime | None, at: float) -> None:
        self._answers[req.cache_key] = (start, at)
        self._streak.pop(req.site, None)

    def fail(self, site: str, why: str) -> None:
        n = self._streak[site] = self._streak.get(site, 0) + 1
        pause = self.ttl_s * min(2 ** (n - 1), self.MAX_BACKOFF)
        self._failed[site] = (why, self.clock() + pause)

    def drop(self, key: Key) -> None:
        """That answer no longer holds: the next decision asks again."""
        self._answers.pop(key, None)

    def drop_partition(self, site: str, partition: str) -> None:
        """A job was placed there: the scheduler's earlier answers no longer hold."""
        for k in [k for k in self._answers if k[0] == site and k[1] == partition]:
            del self._answers[k]

    def prune(self) -> None:
        self._answers = {k: v for k, v in self._answers.items() if self._fresh(v[1])}
        self._failed = {k: v for k, v in self._failed.items() if self.clock() < v[1]}


IMMEDIATE_S = 60.0  # a start this close to when it was asked: "now", while there is room


def still_holds(
    start: datetime,
    asked_wall: datetime,
    shape: Shape | None,
    partition: PartitionState | None,
    placed_since: Sequence[Shape],
) -> bool:
    """Whether a scheduler's start answer, asked before fedhpc placed `placed_since` on the
    same partition, still holds: only an immediate start of a one-node shape, when the
    partition's free CPUs and GPUs in the latest probe hold those jobs and this one too. Any
    other answer is stale once a job went there (the job may take the slot it predicted), so
    a burst re-asks only once the room it was told about is taken: over a slow link each
    re-ask is a round trip per placement pass. Conservative: a probe newer than some of
    those jobs counts them twice."""
    if shape is None or partition is None or shape.nodes != 1 or not partition.available:
        return False
    if start > asked_wall + timedelta(seconds=IMMEDIATE_S):
        return False
    cpus = shape.cpus + sum(s.nodes * s.cpus for s in placed_since)
    gpus = shape.gpus + sum(s.nodes * s.gpus for s in placed_since)
    fits_gpus = gpus <= partition.free_gpus if shape.gpus else True
    return (
        cpus <= partition.free_cpus
        and shape.cpus <= partition.max_free_cpus_on_node
        and (fits_gpus)
    )


def requests_from_trace(
    trace: DecisionTrace, *, top: int = 8, per_partition: bool = True, cap: int = 24
) -> list[EstimateRequest]:
    """The best `top` feasible candidates of a first (pure) pass, to refine with estimator (b),
    plus (`per_partition`) the best candidate of every other feasible partition, at most `cap`:
    a partition the first pass ranks low may be the one whose queue moves first."""
    feasible: list[CandidateTrace] = [c for c in trace.candidates if c.feasible]
    chosen = feasible[:top]
    if per_partition:
        seen = {(c.site, c.partition) for c in chosen}
        for c in feasible[top:]:
            if (c.site, c.partition) not in seen:
                seen.add((c.site, c.partition))
                chosen.append(c)
    return [EstimateRequest(c.site, c.partition, c.account, c.shape, c.qos) for c in chosen[:cap]]


def _section_command(adapter: SiteAdapter, dialect: _TestOnly, req: EstimateRequest) -> Command:
    spec = JobSpec(
        name="fedhpc-estimate",
        command=("true",),
        partition=req.partition,
        account=req.account,
        qos=req.qos,
        shape=req.shape,
    )
    inner = dialect.test_only_command(adapter.render(spec))
    return Command(("sh", "-c", _TEST_ONLY, "sh", inner.stdin or ""), env=inner.env)


async def _site_estimates(
    adapter: SiteAdapter, reqs: Sequence[EstimateRequest], timeout_s: float
) -> tuple[dict[int, datetime | None], str | None]:
    """(index -> start, or None when that shape was refused), and why the site failed as a
    whole (None when it answered for at least one shape)."""
    dialect = adapter.dialect
    if not isinstance(dialect, _TestOnly):
        name = getattr(dialect, "name", "this dialect")
        return {}, NO_DRY_RUN.get(name, f"{name} has no start-estimate command")
    sections = {f"t{i}": _section_command(adapter, dialect, r) for i, r in enumerate(reqs)}
    result: CommandResult | None = None
    try:
        # The remote timeout, and a local one for a transport that hangs before it starts.
        with anyio.move_on_after(timeout_s):
            result = await adapter.transport.run(batch(sections, timeout_s=timeout_s))
    except FedError as exc:
        # Any typed error is this site's alone (TransportError, or TransportUnavailable: an ssh
        # login that needs a person): raised in the task group it would cancel every other site.
        log.warning("test-only failed", site=adapter.name, error=exc.message)
        return {}, f"unreachable ({exc.message})"
    if result is None:
        log.warning("test-only timed out", site=adapter.name, timeout_s=timeout_s)
        return {}, f"no answer within {timeout_s:g} s"
    parts = split_batch(result.stdout)
    out: dict[int, datetime | None] = {}
    errors: list[str] = []
    for i, req in enumerate(reqs):
        section = parts.get(f"t{i}")
        if section is None:
            continue
        answer = CommandResult(section.returncode, section.stdout, "")
        try:
            prediction = dialect.parse_test_only(answer)
        except (ValueError, ArithmeticError, OSError) as exc:
            # An answer no scheduler gives (garbage on the channel): that shape has none, and
            # a raise here would cancel every other site's call in the task group.
            log.warning("test-only unreadable", site=req.site, error=str(exc)[:200])
            out[i] = None
            errors.append(f"unreadable answer ({str(exc)[:120]})")
            continue
        except FedError as exc:
            log.info(
                "test-only rejected", site=req.site, partition=req.partition, error=exc.message
            )
            out[i] = None
            errors.append(exc.message)
            continue
        start = getattr(prediction, "start", None)
        out[i] = start if isinstance(start, datetime) else None
    if not parts:
        return out, f"unreadable answer (exit {result.returncode})"
    if errors and len(errors) == len(reqs):
        # Every shape failed alike (a controller that is down answers each one so): the site.
        # The scheduler's words reach the agent in the trace: printable characters only.
        said = "".join(c if c.isprintable() else "?" for c in errors[0][:160])
        return {}, f"every test submission failed ({said})"
    return out, None


async def ask_scheduler(
    requests: Iterable[EstimateRequest],
    adapters: Mapping[str, SiteAdapter],
    *,
    timeout_s: float = 2.0,
    cache: EstimateCache | None = None,
    skip: Mapping[str, str] | None = None,
) -> SchedulerAnswer:
    """One batched remote call per site for the requests the cache cannot answer, all sites in
    parallel, each bounded by `timeout_s`. `skip`: sites not to ask, with why (offline)."""
    clock = cache.clock if cache is not None else time.monotonic
    answer = SchedulerAnswer()
    todo: dict[str, list[EstimateRequest]] = {}
    seen: set[tuple[str, str, str | None, str | None, str]] = set()
    for req in requests:
        if req.cache_key in seen:
            continue
        seen.add(req.cache_key)
        why = (skip or {}).get(req.site) or (cache.failed(req.site) if cache else None)
        if req.site not in adapters:
            why = why or "no adapter"
        if why is not None:
            answer.notes[req.site] = why
            continue
        hit = cache.get(req) if cache is not None else None
        if hit is not None:
            answer.hits += 1
            start, at = hit
            answer.take(req, start, at)
            if start is None:
                answer.notes.setdefault(
                    req.site, "no start for a test submission (refused, or unreadable)"
                )
            continue
        todo.setdefault(req.site, []).append(req)

    async def one(site: str) -> None:
        reqs = todo[site]
        at = clock()
        try:
            got, why = await _site_estimates(adapters[site], reqs, timeout_s)
        except Exception as exc:  # one site's surprising answer is its own, never the others'
            log.exception("test-only failed", site=site)
            got, why = {}, f"unreadable answer ({type(exc).__name__})"
        answer.calls += 0 if why is not None and why in NO_DRY_RUN.values() else 1
        if why is not None:
            answer.notes[site] = why
            if cache is not None:
                cache.fail(site, why)
            return
        for i, req in enumerate(reqs):
            start = got.get(i)
            if cache is not None and i in got:
                cache.put(req, start, at)
            answer.take(req, start, at)
        refused = sum(1 for i in range(len(reqs)) if got.get(i) is None)
        if refused:
            answer.notes[site] = (
                f"no start for {refused} of {len(reqs)} test submissions (refused, or no "
                "readable start time)"
            )

    async with anyio.create_task_group() as tg:
        for site in sorted(todo):
            tg.start_soon(one, site, name=f"test-only:{site}")
    if cache is not None:
        cache.calls += answer.calls
    return answer


async def scheduler_estimates(
    requests: Iterable[EstimateRequest],
    adapters: Mapping[str, SiteAdapter],
    *,
    timeout_s: float = 30.0,
) -> dict[Key, datetime]:
    """(site, partition, account, qos, shape key) -> predicted start, from one batched remote
    call per site. Sites without an adapter, without a dry-run command, or that fail are simply
    absent."""
    return (await ask_scheduler(requests, adapters, timeout_s=timeout_s)).starts
