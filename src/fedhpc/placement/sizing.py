"""Sizing: from the maximum useful request down to observed and allowed capacity, never below the
minimum; joint sizing adds a few more legal shapes per partition for the objective to compare."""

from __future__ import annotations

import math

from fedhpc.domain.envelope import ResourceEnvelope
from fedhpc.domain.job import Shape
from fedhpc.domain.site import PartitionSpec
from fedhpc.placement.context import Live

__all__ = ["Ladder", "gpus_nodes", "joint_shapes", "size_shape"]


def _fit(lo: int, hi: int, *caps: int) -> int:
    """hi reduced to every cap, never below lo."""
    return max(lo, min(hi, *caps))


def _accelerator_type(env: ResourceEnvelope, spec: PartitionSpec, gpus: int) -> str | None:
    # Typed GRES only when the task named types: an untyped request is easier to schedule.
    acc = spec.node.accelerator
    return acc.type if acc is not None and gpus > 0 and env.accelerator_types else None


def _limits(spec: PartitionSpec) -> tuple[int, int, int, int]:
    node = spec.node
    gpus = node.accelerator.count if node.accelerator else 0
    return gpus, node.cpus, node.memory_mib, min(spec.max_nodes_per_job, node.count)


def gpus_nodes(
    env: ResourceEnvelope, spec: PartitionSpec, live: Live | None, *, observed: bool = True
) -> tuple[int, int]:
    """GPUs per node and nodes of `size_shape`'s shape (what a charge scales with)."""
    g_lim, _, _, n_lim = _limits(spec)
    big = 1 << 30
    obs_g = live.max_free_gpus_on_node if observed and live else big
    gpus = _fit(env.gpus.min, env.gpus.upper, g_lim, obs_g)
    if observed and live:
        fits = live.free_gpus // gpus if gpus else live.free_nodes
        obs_n = max(fits, 0)
    else:
        obs_n = big
    nodes = _fit(env.nodes.min, env.nodes.upper, n_lim, obs_n)
    return gpus, max(nodes, min(spec.min_nodes_per_job, env.nodes.upper))


def size_shape(
    env: ResourceEnvelope, spec: PartitionSpec, live: Live | None, *, observed: bool = True
) -> Shape:
    """The paper's sizing: each dimension at its maximum useful value, reduced to the partition's
    limits and (when `observed`) to the free capacity the probe saw; never below the minimum.
    If even the minimum exceeds a limit the minimum stays, and the capacity rule says why."""
    _, c_lim, m_lim, _ = _limits(spec)
    big = 1 << 30
    obs_c = live.max_free_cpus_on_node if observed and live else big
    obs_m = live.free_memory_mib if observed and live else big
    gpus, nodes = gpus_nodes(env, spec, live, observed=observed)
    cpus = _fit(env.cpus.min, env.cpus.upper, c_lim, obs_c)
    mem = _fit(env.memory.min, env.memory.upper, m_lim, obs_m) if env.memory.upper else 0
    wall = _fit(env.wall_time.min, env.wall_time.upper, spec.max_wall_s)
    return Shape.model_construct(
        nodes=nodes,
        cpus=cpus,
        gpus=gpus,
        memory_mib=mem,
        wall_time_s=wall,
        accelerator_type=_accelerator_type(env, spec, gpus),
    )


def _scaled(lo: int, hi: int, frac: float) -> int:
    return max(lo, min(hi, math.ceil(hi * frac - 1e-9)))


def _with_units(env: ResourceEnvelope, spec: PartitionSpec, top: Shape, units: int) -> Shape:
    """`top` shrunk so its scaling dimension (GPUs, else CPUs) is `units`; CPUs and memory follow
    proportionally, never below their minimum."""
    if top.gpus:
        frac = units / top.gpus
        return top.model_copy(
            update={
                "gpus": units,
                "cpus": _scaled(env.cpus.min, top.cpus, frac),
                "memory_mib": _scaled(env.memory.min, top.memory_mib, frac)
                if top.memory_mib
                else 0,
                "accelerator_type": _accelerator_type(env, spec, units),
            }
        )
    frac = units / top.cpus
    mem = _scaled(env.memory.min, top.memory_mib, frac) if top.memory_mib else 0
    return top.model_copy(update={"cpus": units, "memory_mib": mem})


class Ladder:
    """What joint sizing offers besides the paper's shape, which alone reads the probe: the
    largest shape the partition allows (it may wait for capacity but run faster) and
    power-of-two steps of its unit (GPUs, else CPUs) down to the minimum. The same for every
    probe of the partition, so a group's children build it once; each step's shape is made
    when first asked for."""

    __slots__ = ("_env", "_shapes", "_spec", "gpu_task", "steps", "top")

    def __init__(self, env: ResourceEnvelope, spec: PartitionSpec) -> None:
        self._env, self._spec = env, spec
        self.top = top = size_shape(env, spec, None, observed=False)
        self.gpu_task = gpu_task = top.gpus > 0
        lo = env.gpus.min if gpu_task else env.cpus.min
        hi = top.gpus if gpu_task else top.cpus
        steps = [hi]
        u = 1 << (hi.bit_length() - 1) if hi > 0 else 0
        while u >= max(lo, 1):
            if u < hi:
                steps.append(u)
            u >>= 1
        if lo not in steps and lo > 0:
            steps.append(lo)
        self.steps: tuple[int, ...] = tuple(steps)
        self._shapes: dict[int, Shape] = {hi: top}

    def shape(self, units: int) -> Shape:
        """The ladder's shape at `units` (one of `steps`)."""
        got = self._shapes.get(units)
        if got is None:
            got = self._shapes[units] = _with_units(self._env, self._spec, self.top, units)
        return got

    def units(self, shape: Shape) -> int:
        return shape.gpus if self.gpu_task else shape.cpus


def joint_shapes(
    env: ResourceEnvelope,
    spec: PartitionSpec,
    live: Live | None,
    *,
    limit: int,
    ladder: Ladder | None = None,
) -> tuple[Shape, ...]:
    """The paper's shape first, then the largest shape the partition allows (it may wait for
    capacity but run faster) and power-of-two steps down to the minimum, at most `limit`.
    `ladder`: this envelope's `Ladder` on `spec`, when the caller keeps one."""
    first = size_shape(env, spec, live)
    steps = ladder if ladder is not None else Ladder(env, spec)
    out: list[Shape] = [first]
    # The paper's shape covers its unit count. Every step has its own unit count, so no step
    # can equal the paper's shape or another step.
    done = {steps.units(first)}
    for units in steps.steps:
        if units in done:
            continue
        done.add(units)
        if len(out) >= limit:
            break
        out.append(steps.shape(units))
    return tuple(out)
