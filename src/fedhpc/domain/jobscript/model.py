"""What a job script's header asked for, and each directive with what became of it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Directive", "Fate", "Request", "Scheduler"]

Scheduler = Literal["slurm", "pbs", "lsf"]
# What became of a directive: read into the envelope; replaced by what fedhpc does itself (job
# name, output files); or not carried over (kept and reported, with the reason).
Fate = Literal["envelope", "fedhpc", "dropped"]


class Directive(BaseModel):
    """One option of one directive line, as written, and its fate."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    line: int = Field(description="1-based line number in the script")
    text: str = Field(description="the option as written, e.g. '--gres=gpu:a100:2'")
    fate: Fate
    note: str = Field(default="", description="what it became, or why it was not carried")


@dataclass
class Request:
    """The header's values, as the scheduler would read them (None: not given). Per-node
    values are per node; totals say so. Filled by the per-scheduler readers."""

    nodes: int | None = None
    ntasks: int | None = None  # total tasks (Slurm -n, LSF -n slots)
    tasks_per_node: int | None = None
    cpus_per_task: int | None = None
    cpus_per_node: int | None = None  # PBS ncpus / ppn
    gpus_per_node: int | None = None
    gpus_total: int | None = None
    gpus_per_task: int | None = None
    gpu_type: str | None = None
    mem_per_node_mib: int | None = None
    mem_total_mib: int | None = None  # PBS -l mem: the whole job
    mem_per_cpu_mib: int | None = None
    mem_per_gpu_mib: int | None = None
    mem_per_task_mib: int | None = None  # LSF rusage[mem] (per slot)
    wall_s: int | None = None
    partition: str | None = None
    account: str | None = None
    job_name: str | None = None
    output: str | None = None
    error: str | None = None
    array: str | None = None
    dependency: str | None = None
    constraint: str | None = None
    notes: list[str] = field(default_factory=list)
