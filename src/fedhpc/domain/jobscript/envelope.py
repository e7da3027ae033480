"""A script's header as envelope bounds, and the argv that runs its body unchanged."""

from __future__ import annotations

import math
from typing import Any

from fedhpc.domain.jobscript.model import Request
from fedhpc.domain.jobscript.script import JobScript

__all__ = ["script_command", "script_envelope"]


def _ceil(total: int, parts: int) -> int:
    return max(1, math.ceil(total / parts))


def script_envelope(script: JobScript) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Envelope fields (as the request's JSON would give them) from the header, and how the
    per-node figures were worked out where the header gave totals. The header asks for exact
    amounts, so each bound is its minimum (max unset: = min)."""
    r: Request = script.request
    notes: list[str] = []
    nodes = r.nodes
    tasks = r.tasks_per_node
    if tasks is None and r.ntasks is not None:
        if nodes is None:
            nodes = 1
            notes.append(f"{r.ntasks} tasks and no node count: read as one node")
        tasks = _ceil(r.ntasks, nodes)
    elif nodes is None and tasks is not None and r.ntasks is not None:
        nodes = _ceil(r.ntasks, tasks)  # LSF: -n slots over span[ptile]
    nodes = nodes or 1
    cpus = r.cpus_per_node or (tasks or 1) * (r.cpus_per_task or 1)
    if tasks and tasks > 1:
        notes.append(
            f"{tasks} tasks per node: fedhpc asks for {cpus} CPUs per node as one task; "
            "the body's launcher (srun, mpiexec) starts the ranks"
        )
    gpus = r.gpus_per_node
    if gpus is None and r.gpus_total is not None:
        gpus = _ceil(r.gpus_total, nodes)
    if gpus is None and r.gpus_per_task is not None:
        gpus = r.gpus_per_task * (tasks or 1)
    memory = r.mem_per_node_mib
    if memory is None and r.mem_total_mib is not None:
        memory = _ceil(r.mem_total_mib, nodes)
    if memory is None and r.mem_per_cpu_mib is not None:
        memory = r.mem_per_cpu_mib * cpus
    if memory is None and r.mem_per_gpu_mib is not None and gpus:
        memory = r.mem_per_gpu_mib * gpus
    if memory is None and r.mem_per_task_mib is not None:
        memory = r.mem_per_task_mib * (tasks or 1)
        notes.append("rusage[mem] read per slot, in MB (LSF_UNIT_FOR_LIMITS=MB)")
    env: dict[str, Any] = {"nodes": {"min": nodes}, "cpus": {"min": cpus}}
    if gpus:
        env["gpus"] = {"min": gpus}
    if memory:
        env["memory"] = {"min": memory}
    if r.wall_s is not None:
        env["wall_time"] = {"min": r.wall_s}
    else:
        notes.append("no time limit in the header: the envelope's default applies")
    if r.gpu_type and gpus:
        env["accelerator_types"] = [r.gpu_type.lower()]
    return env, tuple(notes)


def script_command(script: JobScript) -> tuple[str, ...]:
    """`<interpreter from #!> -c BODY`: the body runs unchanged, as one quoted argument (no
    fedhpc strict mode or prologue reaches inside it)."""
    return (*script.interpreter, "-c", script.body)
