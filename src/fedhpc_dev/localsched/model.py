"""The local scheduler's pure core: configuration, job records, directives and the FIFO +
backfill plan. No I/O and no clock: times are arguments."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

__all__ = [
    "DEFAULT_MEM_PER_CPU_MIB",
    "END_STATES",
    "PREFIX",
    "QUEUE_STATES",
    "Config",
    "Job",
    "Partition",
    "Rejected",
    "Slot",
    "expand_path",
    "parse_directives",
    "parse_time",
    "plan_starts",
]

PREFIX = "#LOCALSCHED"
DEFAULT_MEM_PER_CPU_MIB = 1024  # as the Slurm federation's DefMemPerCPU
# The local scheduler's own (Slurm-style) job states, not fedhpc's `JobState`: the ones its
# `queue` lists, and the ones a job ends in.
QUEUE_STATES = frozenset({"PENDING", "RUNNING"})
END_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"})


class Rejected(Exception):
    """A submission the scheduler refuses (unknown partition or account, over a limit)."""


@dataclass(frozen=True, slots=True)
class Partition:
    """A partition: `nodes` identical nodes of `cpus`, `memory_mib` and `gpus` each."""

    name: str
    nodes: int
    cpus: int
    memory_mib: int
    max_wall_s: int
    gpus: int = 0
    gpu_type: str | None = None

    def node_names(self) -> list[str]:
        """Named like the Slurm federation's nodes: 'gpuA100x4' -> gpua100x4-1, gpua100x4-2."""
        stem = re.sub(r"[^a-z0-9]", "", self.name.lower())
        return [f"{stem}-{i}" for i in range(1, self.nodes + 1)]


@dataclass(frozen=True, slots=True)
class Config:
    """What the scheduler manages: partitions by name and the accounts it accepts (none: any)."""

    partitions: dict[str, Partition]
    accounts: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "partitions": [asdict(p) for p in self.partitions.values()],
            "accounts": list(self.accounts),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Config:
        parts = [Partition(**p) for p in data.get("partitions", [])]
        for p in parts:
            if min(p.nodes, p.cpus, p.memory_mib, p.max_wall_s) < 1 or p.gpus < 0:
                raise ValueError(f"partition {p.name}: sizes must be positive")
        return cls({p.name: p for p in parts}, tuple(data.get("accounts", ())))


# One node's share of a job: [node name, cpus, memory MiB, GPU indices on that node].
Slot = tuple[str, int, int, tuple[int, ...]]


@dataclass(slots=True)
class Job:
    """One job's record, stored as JSON; times are timezone-aware UTC datetimes."""

    id: int
    name: str
    partition: str
    user: str
    account: str | None
    nodes: int
    cpus: int
    memory_mib: int
    gpus: int
    time_limit_s: int
    workdir: str
    stdout: str
    stderr: str
    submit: datetime
    state: str = "PENDING"
    reason: str | None = None
    start: datetime | None = None
    end: datetime | None = None
    exit_code: int | None = None
    slots: list[Slot] = field(default_factory=list)
    wrapper_pid: int | None = None
    wrapper_ticks: str | None = None
    child_pgid: int | None = None

    @property
    def nodelist(self) -> str:
        return ",".join(s[0] for s in self.slots)

    @property
    def gpu_indices(self) -> tuple[int, ...]:
        return self.slots[0][3] if self.slots else ()

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("submit", "start", "end"):
            value = getattr(self, key)
            data[key] = value.isoformat(timespec="microseconds") if value else None
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Job:
        data = dict(data)
        for key in ("submit", "start", "end"):
            data[key] = datetime.fromisoformat(data[key]) if data.get(key) else None
        data["slots"] = [(s[0], s[1], s[2], tuple(s[3])) for s in data.get("slots", [])]
        return cls(**data)


def parse_directives(script: str) -> dict[str, str]:
    """`#LOCALSCHED --key=value` lines before the first command, as sbatch reads #SBATCH.
    Lines are cut at '\\n' only, exactly as bash cuts them."""
    out: dict[str, str] = {}
    for i, line in enumerate(script.split("\n")):
        text = line.strip()
        if (i == 0 and text.startswith("#!")) or not text:
            continue
        if not text.startswith("#"):
            break
        words = text.split(None, 1)
        if words[0] != PREFIX or len(words) < 2 or not words[1].startswith("--"):
            continue
        key, _, value = words[1][2:].partition("=")
        out[key.strip()] = value.strip()
    return out


def parse_time(text: str) -> int:
    """Seconds from '3600', 'HH:MM:SS', 'MM:SS' or 'D-HH:MM:SS'."""
    days, _, rest = text.rpartition("-")
    parts = rest.split(":")
    if not all(p.isdigit() for p in parts) or len(parts) > 3 or (days and not days.isdigit()):
        raise Rejected(f"invalid time limit {text!r}")
    seconds = 0
    for p in parts:
        seconds = seconds * 60 + int(p)
    return seconds + int(days or 0) * 86400


def expand_path(pattern: str, job_id: int, name: str, user: str, workdir: str) -> str:
    """Slurm's filename pattern: %j job id, %x job name, %u user, %% a percent sign."""
    subs = {"j": str(job_id), "x": name, "u": user, "%": "%"}
    out = re.sub(r"%([jxu%])", lambda m: subs[m.group(1)], pattern)
    return out if out.startswith("/") else f"{workdir.rstrip('/')}/{out}"


# ---- the plan: FIFO per partition with EASY backfill ----------------------------------------

_Free = dict[str, list[Any]]  # node -> [free cpus, free memory, free GPU indices]


def _free(p: Partition, running: list[Job]) -> _Free:
    free: _Free = {n: [p.cpus, p.memory_mib, list(range(p.gpus))] for n in p.node_names()}
    for job in running:
        for node, cpus, mem, gpus in job.slots:
            if node in free:
                _take(free, (node, cpus, mem, gpus))
    return free


def _take(free: _Free, slot: Slot) -> None:
    entry = free[slot[0]]
    entry[0] -= slot[1]
    entry[1] -= slot[2]
    entry[2] = [g for g in entry[2] if g not in slot[3]]


def _give(free: _Free, slot: Slot) -> None:
    entry = free[slot[0]]
    entry[0] += slot[1]
    entry[1] += slot[2]
    entry[2] = sorted({*entry[2], *slot[3]})


def _fit(job: Job, free: _Free) -> list[Slot] | None:
    """The first `job.nodes` nodes (in name order) with enough CPUs, memory and GPUs."""
    slots: list[Slot] = []
    for node, (cpus, mem, gpus) in free.items():
        if cpus >= job.cpus and mem >= job.memory_mib and len(gpus) >= job.gpus:
            slots.append((node, job.cpus, job.memory_mib, tuple(gpus[: job.gpus])))
            if len(slots) == job.nodes:
                return slots
    return None


def _expected_end(job: Job, now: datetime) -> datetime:
    start = job.start or now
    return max(now, start + timedelta(seconds=job.time_limit_s))


def _shadow(head: Job, free: _Free, holders: list[Job], now: datetime) -> datetime | None:
    """When `head` could start if every running job used its whole time limit."""
    sim = {n: [e[0], e[1], list(e[2])] for n, e in free.items()}
    for job in sorted(holders, key=lambda j: (_expected_end(j, now), j.id)):
        for slot in job.slots:
            _give(sim, slot)
        if _fit(head, sim) is not None:
            return _expected_end(job, now)
    return None


def plan_starts(config: Config, jobs: list[Job], now: datetime) -> list[tuple[Job, list[Slot]]]:
    """Which pending jobs start now and where. Jobs queue in id order per partition; a later
    job may jump ahead (backfill) only if it ends, by its time limit, before the first blocked
    job could start. Sets `reason` on the jobs that keep waiting (Resources, then Priority)."""
    starts: list[tuple[Job, list[Slot]]] = []
    for part in config.partitions.values():
        running = [j for j in jobs if j.state == "RUNNING" and j.partition == part.name]
        free = _free(part, running)
        holders = list(running)
        shadow: datetime | None = None
        blocked = False
        pending = sorted(
            (j for j in jobs if j.state == "PENDING" and j.partition == part.name),
            key=lambda j: j.id,
        )
        for job in pending:
            slots = _fit(job, free)
            fits_before_head = (
                shadow is not None and now + timedelta(seconds=job.time_limit_s) <= shadow
            )
            if slots is not None and (not blocked or fits_before_head):
                for slot in slots:
                    _take(free, slot)
                job.reason = None
                job.slots = slots
                holders.append(job)
                starts.append((job, slots))
            elif not blocked:
                blocked = True
                job.reason = "Resources"
                shadow = _shadow(job, free, holders, now)
            else:
                job.reason = "Priority"
    return starts
