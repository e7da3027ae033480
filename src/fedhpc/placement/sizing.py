"""Sizing: from the maximum useful request down to observed and allowed capacity, never below the
minimum; joint sizing adds a few more legal shapes per partition for the objective to compare."""

from __future__ import annotations

import math

from fedhpc.domain.envelope import ResourceEnvelope
from fedhpc.domain.job import Shape
from fedhpc.domain.site import PartitionSpec
from fedhpc.placement.context import Live

__all__ = ["gpus_nodes", "joint_shapes", "size_shape"]


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


def joint_shapes(
    env: ResourceEnvelope, spec: PartitionSpec, live: Live | None, *, limit: int
) -> tuple[Shape, ...]:
    """The paper's shape first, then the largest shape the partition allows (it may wait for
    capacity but run faster) and power-of-two steps down to the minimum, at most `limit`."""
    first = size_shape(env, spec, live)
    top = size_shape(env, spec, live, observed=False)
    gpu_task = top.gpus > 0
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
    out: list[Shape] = [first]
    seen = {first}
    done = {first.gpus if gpu_task else first.cpus}  # the paper's shape covers its unit count
    for units in steps:
        if units in done:
            continue
        done.add(units)
        if len(out) >= limit:
            break
        shape = top if units == hi else _with_units(env, spec, top, units)
        if shape not in seen:
            seen.add(shape)
            out.append(shape)
    return tuple(out)
