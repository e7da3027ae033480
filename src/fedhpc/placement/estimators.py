"""Estimates for the objective: queue wait W (three ways), runtime R, environment preparation E."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from fedhpc.domain.envelope import ResourceEnvelope
from fedhpc.domain.job import Shape
from fedhpc.domain.units import MAX_SECONDS, UtcDatetime, as_utc
from fedhpc.placement.context import Live
from fedhpc.placement.errors import EstimatorErrors
from fedhpc.placement.policy import Settings, WaitMethod

__all__ = [
    "EnvCache",
    "RuntimeDeclaration",
    "RuntimeModel",
    "RuntimeObservation",
    "SchedulerEstimates",
    "SchedulerKey",
    "WaitEstimate",
    "WaitHistory",
    "WaitObservation",
    "env_prep_s",
    "estimate_wait",
    "free_now",
    "paper_wait",
    "size_bucket",
]

# (site, partition, account, qos, shape_key): one candidate as the scheduler was asked about it
# (an account or QoS of its own may start at another time on the same partition and shape).
SchedulerKey = tuple[str, str, str | None, str | None, str]
# SchedulerKey -> the start time the scheduler predicts (sbatch --test-only).
SchedulerEstimates = Mapping[SchedulerKey, datetime]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class WaitObservation(_Frozen):
    """One observed queue wait (start - eligible) of a finished or started job."""

    site: str
    partition: str
    gpus: int = Field(default=0, ge=0, description="per node")
    cpus: int = Field(default=1, ge=1, description="per node")
    nodes: int = Field(default=1, ge=1)
    wait_s: float = Field(ge=0, le=MAX_SECONDS)
    observed_at: UtcDatetime
    job: str = Field(
        default="",
        description="the scheduler's job id where known: a sweep's jobs of one shape that start "
        "in the same second after the same wait are each an observation",
    )


class RuntimeObservation(_Frozen):
    """One observed runtime of this kind of task at a shape."""

    gpus: int = Field(default=0, ge=0, description="per node")
    cpus: int = Field(default=1, ge=1, description="per node")
    nodes: int = Field(default=1, ge=1)
    runtime_s: float = Field(gt=0, le=MAX_SECONDS)


class RuntimeDeclaration(_Frozen):
    """A declared runtime at a reference shape, and how it scales (Amdahl serial fraction)."""

    seconds: float = Field(gt=0, le=MAX_SECONDS)
    gpus: int = Field(default=0, ge=0, description="per node, at the reference shape")
    cpus: int = Field(default=1, ge=1, description="per node, at the reference shape")
    nodes: int = Field(default=1, ge=1)
    serial_fraction: float | None = Field(default=None, ge=0, le=1)


class EnvCache(_Frozen):
    """Environments (image or env names) already prepared per site, and what preparing costs."""

    cached: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    prepare_s: dict[str, float] = Field(default_factory=dict, description="per-site cost")


def _unit_shape(kind: str, units: int) -> Shape:
    """A one-node shape of `units` GPUs or CPUs: what the learned index keys on."""
    gpus = units if kind == "gpu" else 0
    return Shape.model_construct(
        nodes=1,
        cpus=1 if gpus else units,
        gpus=gpus,
        memory_mib=0,
        wall_time_s=1,
        accelerator_type=None,
    )


def _units(gpus: int, cpus: int, nodes: int) -> tuple[str, int]:
    return ("gpu", gpus * nodes) if gpus else ("cpu", cpus * nodes)


def size_bucket(gpus: int, cpus: int, nodes: int) -> str:
    """Request-size bucket by powers of two of the scaling units: 'gpu:4-7', 'cpu:32-63'."""
    kind, n = _units(gpus, cpus, nodes)
    lo = 1 << (max(n, 1).bit_length() - 1)
    hi = lo * 2 - 1
    return f"{kind}:{lo}" if lo == hi else f"{kind}:{lo}-{hi}"


@dataclass(frozen=True, slots=True)
class WaitEstimate:
    """Typical and 90th-percentile wait, and which method produced them; `by_method`: what each
    estimator that had data predicted (recorded with a placed job, to judge them later)."""

    wait_s: float
    p90_s: float
    source: str
    by_method: tuple[tuple[str, float], ...] = ()


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank quantile; the median of an even count is the mean of the middle two."""
    n = len(sorted_values)
    if q == 0.5:
        mid = n // 2
        return sorted_values[mid] if n % 2 else (sorted_values[mid - 1] + sorted_values[mid]) / 2
    return sorted_values[min(n - 1, max(0, math.ceil(q * n) - 1))]


class WaitHistory:
    """Observed waits indexed per (site, partition, size bucket) and per (site, partition), using
    only observations inside the window before `now` (later ones are ignored: replayable)."""

    def __init__(
        self, observations: Iterable[WaitObservation], *, now: datetime, settings: Settings
    ) -> None:
        self.min_samples = settings.learned_min_samples
        oldest = now.timestamp() - settings.learned_window_s
        keep = [o for o in observations if oldest <= o.observed_at.timestamp() <= now.timestamp()]
        keep.sort(key=lambda o: (o.observed_at, o.wait_s), reverse=True)
        by_bucket: dict[tuple[str, str, str], list[float]] = defaultdict(list)
        by_part: dict[tuple[str, str], list[tuple[str, int, float]]] = defaultdict(list)
        cap = settings.learned_max_samples
        for o in keep:
            b = (o.site, o.partition, size_bucket(o.gpus, o.cpus, o.nodes))
            if len(by_bucket[b]) < cap:
                by_bucket[b].append(o.wait_s)
            if len(by_part[b[:2]]) < cap:
                by_part[b[:2]].append((*_units(o.gpus, o.cpus, o.nodes), o.wait_s))
        self._bucket = {k: sorted(v) for k, v in by_bucket.items()}
        self._part = dict(by_part)
        # Answers by (site, partition, gpus, cpus, nodes): the index is immutable, and a group
        # or a control cycle asks the same few questions thousands of times.
        self._answers: dict[tuple[str, str, int, int, int], WaitEstimate | None] = {}
        self._floors: dict[tuple[str, str, str, int, int], tuple[float, float, bool]] = {}

    def floor(
        self, site: str, partition: str, kind: str, lo: int, hi: int
    ) -> tuple[float, float, bool]:
        """The least typical and p90 wait a learned estimate can give any shape of `kind`
        ('gpu' or 'cpu') whose units (GPUs or CPUs x nodes) lie in [lo, hi], and whether some
        such shape gets no learned estimate (it falls back to another method). Exact over the
        range: the answer only changes at a power of two (a bucket) or at an observed size."""
        key = (site, partition, kind, lo, hi)
        hit = self._floors.get(key)
        if hit is None:
            hit = self._floors[key] = self._floor(site, partition, kind, max(lo, 1), max(hi, 1))
        return hit

    def _floor(
        self, site: str, partition: str, kind: str, lo: int, hi: int
    ) -> tuple[float, float, bool]:
        sizes = {u for k, u, _ in self._part.get((site, partition), ()) if k == kind}
        cuts = {lo} | {u for u in sizes if lo <= u <= hi} | {u + 1 for u in sizes if lo <= u < hi}
        b = 1 << (lo.bit_length() - 1)
        while b <= hi:
            if b >= lo:
                cuts.add(b)
            b <<= 1
        typical, p90, gap = math.inf, math.inf, False
        for u in cuts:  # one shape per stretch of units with a constant answer
            est = self.estimate(site, partition, _unit_shape(kind, u))
            if est is None:
                gap = True
            else:
                typical, p90 = min(typical, est.wait_s), min(p90, est.p90_s)
        return typical, p90, gap

    def estimate(self, site: str, partition: str, shape: Shape) -> WaitEstimate | None:
        key = (site, partition, shape.gpus, shape.cpus, shape.nodes)
        if key in self._answers:
            return self._answers[key]
        answer = self._answers[key] = self._estimate(site, partition, shape)
        return answer

    def _estimate(self, site: str, partition: str, shape: Shape) -> WaitEstimate | None:
        bucket = size_bucket(shape.gpus, shape.cpus, shape.nodes)
        values = self._bucket.get((site, partition, bucket), [])
        source = f"learned:{bucket}"
        if len(values) < self.min_samples:
            # The partition's other requests, but only those at least as large as this one: a
            # small job's short wait says nothing about a large one (the paper's estimator failed
            # on larger requests; ours did too, in the matched rounds, before this rule).
            kind, units = _units(shape.gpus, shape.cpus, shape.nodes)
            values = sorted(
                w for k, u, w in self._part.get((site, partition), []) if k == kind and u >= units
            )
            source = "learned:partition"
        if len(values) < self.min_samples:
            return None
        return WaitEstimate(
            _quantile(values, 0.5), _quantile(values, 0.9), f"{source} (n={len(values)})"
        )


def _slots(shape: Shape, live: Live) -> int:
    """Request-sized slots free now: per node first (a job never spans a node's slots)."""
    if shape.gpus:
        return live.free_gpus // shape.gpus if live.max_free_gpus_on_node >= shape.gpus else 0
    return live.free_cpus // shape.cpus if live.max_free_cpus_on_node >= shape.cpus else 0


def free_now(shape: Shape, live: Live | None) -> bool:
    """A request-sized slot is free and no pending job that could take it is queued ahead."""
    if live is None or live.pending - live.blocked > 0:
        return False
    return _slots(shape, live) >= shape.nodes


def paper_wait(shape: Shape, live: Live | None, settings: Settings) -> WaitEstimate:
    """Request-sized slots in free GRES/CPU first; when none, queue depth x a per-job wait.
    It never infers free GPUs from node state alone (a mixed node may have none)."""
    u = settings.uncertainty_factor
    if live is None:
        return WaitEstimate(math.inf, math.inf, "paper:no-live-state")
    slots = _slots(shape, live)
    if slots >= shape.nodes:
        return WaitEstimate(
            settings.dispatch_s, settings.dispatch_s * u, f"paper:free-slots={slots}"
        )
    wait = settings.dispatch_s + (live.pending + 1) * settings.per_pending_s
    return WaitEstimate(wait, wait * u, f"paper:queue-depth={live.pending}")


def _scheduler_wait(
    start: datetime, shape: Shape, live: Live | None, now: datetime, settings: Settings
) -> WaitEstimate:
    if free_now(shape, live):
        # Slurm's will-run test (sbatch --test-only) also plans pending jobs that cannot start
        # (dependencies, holds): with a slot free and nothing able to take it first, the job
        # starts at once whatever it predicts (Slurm 22.05, seen here).
        d = settings.dispatch_s
        return WaitEstimate(d, d * settings.uncertainty_factor, "scheduler:free-now")
    w = min(max(0.0, (as_utc(start) - as_utc(now)).total_seconds()), MAX_SECONDS)
    return WaitEstimate(w, w * settings.uncertainty_factor + settings.dispatch_s, "scheduler")


def estimate_wait(
    method: WaitMethod,
    *,
    site: str,
    partition: str,
    key: str,
    shape: Shape,
    live: Live | None,
    now: datetime,
    settings: Settings,
    history: WaitHistory | None,
    scheduler: SchedulerEstimates | None,
    scheduler_notes: Mapping[str, str] | None = None,
    errors: EstimatorErrors | None = None,
    account: str | None = None,
    qos: str | None = None,
) -> WaitEstimate:
    """W by the chosen method, falling back (scheduler -> learned -> paper) when it has no data.
    With `auto` and no scheduler estimate, paper replaces learned where its recent error on
    this partition is smaller (`errors`). When the scheduler was asked (`scheduler` or
    `scheduler_notes` given) but has no answer for this candidate, the source says why."""
    asked = scheduler is not None or scheduler_notes is not None
    start = scheduler.get((site, partition, account, qos, key)) if scheduler else None
    sched = _scheduler_wait(start, shape, live, now, settings) if start is not None else None
    learned = history.estimate(site, partition, shape) if history is not None else None
    paper = paper_wait(shape, live, settings)
    by = tuple(
        (name, round(w.wait_s, 3))
        for name, w in (("scheduler", sched), ("learned", learned), ("paper", paper))
        if w is not None and math.isfinite(w.wait_s)
    )
    chosen: WaitEstimate
    if sched is not None and method in (WaitMethod.SCHEDULER, WaitMethod.AUTO):
        return replace(sched, by_method=by)
    if learned is not None and method in (WaitMethod.LEARNED, WaitMethod.AUTO):
        chosen = learned
        why = errors.prefer(site, partition, "learned", "paper") if errors is not None else None
        if why is not None and method is WaitMethod.AUTO:
            chosen = replace(paper, source=f"{paper.source}; {why}")
    else:
        chosen = paper
    if asked and method in (WaitMethod.SCHEDULER, WaitMethod.AUTO):
        note = (scheduler_notes or {}).get(site) or "not asked (outside the top candidates)"
        chosen = replace(chosen, source=f"{chosen.source}; no scheduler estimate: {note}")
    return replace(chosen, by_method=by)


@dataclass(frozen=True, slots=True)
class RuntimeModel:
    """R(shape) = a + b / units (Amdahl), fitted from history, a declaration, or the envelope."""

    serial_s: float
    parallel_s: float  # at one unit
    exact: Mapping[tuple[int, int, int], float]
    source: str
    # The envelope's own claim: wall_time.min suffices at the minimum shape, so no granted
    # shape (at least the minimum in every dimension) is predicted to take longer. Without
    # this cap a GPU shape of an envelope whose minimum counts CPUs (gpus.min = 0) came out
    # slower than its wall time.
    cap_s: float | None = None

    @classmethod
    def build(
        cls,
        env: ResourceEnvelope,
        declared: RuntimeDeclaration | None,
        history: Sequence[RuntimeObservation],
        settings: Settings,
    ) -> RuntimeModel:
        if history:
            by_shape: dict[tuple[int, int, int], list[float]] = defaultdict(list)
            for o in history:
                by_shape[(o.gpus, o.cpus, o.nodes)].append(o.runtime_s)
            exact = {k: _quantile(sorted(v), 0.5) for k, v in by_shape.items()}
            pts = [(_units(*k)[1], r) for k, r in sorted(exact.items())]
            fitted = _fit_amdahl(pts)
            if fitted is not None:
                return cls(fitted[0], fitted[1], exact, "history:fit")
            u0, r0 = pts[0]
            s = settings.serial_fraction
            return cls(r0 * s, r0 * (1 - s) * max(u0, 1), exact, "history:amdahl")
        if declared is not None:
            s = (
                settings.serial_fraction
                if declared.serial_fraction is None
                else declared.serial_fraction
            )
            u0 = _units(declared.gpus, declared.cpus, declared.nodes)[1]
            r0 = declared.seconds
            return cls(r0 * s, r0 * (1 - s) * max(u0, 1), {}, "declared:amdahl")
        # Nothing known: the minimum wall time at the minimum shape, Amdahl to other shapes.
        u0 = _units(env.gpus.min, env.cpus.min, env.nodes.min)[1]
        r0, s = float(env.wall_time.min), settings.serial_fraction
        return cls(r0 * s, r0 * (1 - s) * max(u0, 1), {}, "envelope:wall_time.min", r0)

    def runtime(self, shape: Shape) -> tuple[float, str]:
        hit = self.exact.get((shape.gpus, shape.cpus, shape.nodes))
        if hit is not None:
            return hit, "history:exact"
        units = max(_units(shape.gpus, shape.cpus, shape.nodes)[1], 1)
        r = self.serial_s + self.parallel_s / units
        return (min(r, self.cap_s) if self.cap_s is not None else r), self.source


def _fit_amdahl(points: Sequence[tuple[int, float]]) -> tuple[float, float] | None:
    """Least squares of R = a + b/u over distinct unit counts; None below two sizes."""
    xs = {u for u, _ in points}
    if len(xs) < 2:
        return None
    n = len(points)
    inv = [1.0 / max(u, 1) for u, _ in points]
    ys = [r for _, r in points]
    mx, my = sum(inv) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in inv)
    b = sum((x - mx) * (y - my) for x, y in zip(inv, ys, strict=True)) / sxx
    b = max(b, 0.0)
    a = max(my - b * mx, 0.0)
    return a, b


def env_prep_s(
    site: str, environment: str | None, cache: EnvCache | None, settings: Settings
) -> tuple[float, str]:
    """E: zero when nothing is required or the site has it cached, else the preparation cost."""
    if environment is None:
        return 0.0, "none required"
    if cache is not None and environment in cache.cached.get(site, ()):
        return 0.0, "cached"
    if cache is not None and site in cache.prepare_s:
        return cache.prepare_s[site], "site preparation cost"
    return settings.default_prepare_s, "default preparation cost"
