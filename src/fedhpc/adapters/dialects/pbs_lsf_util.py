"""Helpers the PBS Pro and LSF dialects share: directive guard, JSON, sizes, health, ids."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from fedhpc.adapters.command import BatchSection, CommandResult
from fedhpc.adapters.dialects import common
from fedhpc.domain.site import Health, NodeStateCounts, PartitionState, SiteProfile, SiteState

__all__ = [
    "HostTally",
    "as_int",
    "check_ids",
    "check_user",
    "directive",
    "health_of",
    "load_json",
    "offline_state",
    "ping_problem",
    "probe_state",
    "size_mib",
]


def directive(prefix: str, flag: str, value: str | int, *, sep: str = " ") -> str:
    """`common.directive`, also refusing values that start with '-': qsub and bsub could read
    such a value as another option."""
    if str(value).startswith("-"):
        raise ValueError(f"unsafe value for {flag}: {value!r} starts with '-'")
    return common.directive(prefix, flag, value, sep=sep)


def load_json(text: str) -> dict[str, Any] | None:
    """The JSON object in `text`, or None. strict=False: PBS emits raw control characters."""
    start = text.find("{")
    if start < 0:
        return None
    try:
        data = json.loads(text[start:], strict=False)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def as_int(value: object, default: int = 0) -> int:
    """An int from a JSON number or numeric string ('4', '4.0'); `default` otherwise."""
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(float(text)) if text else default
        except ValueError:
            return default
    return default


# PBS sizes: '384000000kb', '8gb', '0kb', '512mb', '16w' (words of 8 bytes), plain bytes.
# LSF memory: '245G', '1.2T', '512M', '5.2 Gbytes'.
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(b|w|bytes)?\s*$", re.IGNORECASE)
_TO_MIB = {"": 1 / 1024**2, "k": 1 / 1024, "m": 1.0, "g": 1024.0, "t": 1024.0**2, "p": 1024.0**3}


def size_mib(value: object, *, bare_unit: str = "") -> int:
    """Whole MiB from a scheduler size string; `bare_unit` is the unit of a bare number."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = f"{value}{bare_unit}"
    if not isinstance(value, str):
        return 0
    m = _SIZE.match(value)
    if not m:
        return 0
    number = float(m.group(1))
    prefix = (m.group(2) or (bare_unit if m.group(3) is None else "")).lower()
    factor = _TO_MIB.get(prefix, 0.0)
    if (m.group(3) or "").lower() == "w":
        factor *= 8  # a PBS word is 8 bytes (pbs_resources(7B), "size")
    return int(number * factor)


_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}$")


def check_user(user: str) -> str:
    """A login name safe as an option value (never starts with '-')."""
    if not _USER.match(user):
        raise ValueError(f"not a user name: {user!r}")
    return user


def check_ids(job_ids: Sequence[str], pattern: re.Pattern[str], scheduler: str) -> list[str]:
    """Job ids as argv elements; each must look like one of `scheduler`'s ids."""
    if not job_ids:
        raise ValueError("no job ids given")
    for job_id in job_ids:
        if not pattern.match(job_id):
            raise ValueError(f"not a {scheduler} job id: {job_id!r}")
    return list(job_ids)


def _section_ok(sec: BatchSection | None) -> bool:
    return sec is not None and sec.returncode == 0


def health_of(
    sections: Mapping[str, BatchSection],
    main: str,
    optional: Iterable[str],
    ok: Callable[[BatchSection | None], bool] = _section_ok,
) -> tuple[Health, list[str]]:
    """OFFLINE if the main section failed, DEGRADED if any other wanted section did."""
    if not ok(sections.get(main)):
        return Health.OFFLINE, [main]
    bad = [name for name in optional if not ok(sections.get(name))]
    return (Health.DEGRADED if bad else Health.OK), bad


def ping_problem(result: CommandResult, argv: Sequence[str]) -> str | None:
    """None when the ping command `argv` answered, else what is wrong in one line."""
    if result.returncode == 127:
        return f"{argv[0]} is not on the PATH"
    if result.returncode == 0:
        return None
    text = (result.stderr or result.stdout).strip()
    return text.splitlines()[-1][:200] if text else f"{' '.join(argv)} exited {result.returncode}"


def _buckets() -> dict[str, int]:
    return dict.fromkeys(NodeStateCounts.model_fields, 0)


@dataclass
class HostTally:
    """A queue's hosts counted as PBS and LSF probes both count them: every host by state
    bucket and size; only idle and mixed hosts towards free capacity, and a host's GPUs only
    while a CPU beside them is free (a job needs at least one)."""

    buckets: dict[str, int] = field(default_factory=_buckets)
    total_cpus: int = 0
    total_gpus: int = 0
    free_cpus: int = 0
    free_gpus: int = 0
    free_memory_mib: int = 0
    max_free_cpus: int = 0
    max_free_gpus: int = 0

    def add(
        self, bucket: str, *, cpus: int, cpus_used: int, gpus: int, gpus_used: int, free_mib: int
    ) -> None:
        """One host: its state bucket, CPU and GPU totals and use, and its free memory."""
        self.buckets[bucket] += 1
        self.total_cpus += cpus
        self.total_gpus += gpus
        if bucket not in ("idle", "mixed"):
            return  # exclusive, full or unusable: nothing here can start a new job
        free_cpus = max(0, cpus - cpus_used)
        free_gpus = max(0, gpus - gpus_used) if free_cpus else 0
        self.free_cpus += free_cpus
        self.free_gpus += free_gpus
        self.free_memory_mib += free_mib
        self.max_free_cpus = max(self.max_free_cpus, free_cpus)
        self.max_free_gpus = max(self.max_free_gpus, free_gpus)

    def partition(
        self,
        name: str,
        gpu_type: str | None,
        *,
        pending: int,
        blocked: int,
        running: int,
        user_pending: int,
        user_running: int,
        available: bool = True,
    ) -> PartitionState:
        """The partition's state: these hosts plus the queue's job counts."""
        return PartitionState(
            name=name,
            nodes=NodeStateCounts(**self.buckets),
            total_gpus=self.total_gpus,
            free_gpus=self.free_gpus,
            free_gpus_by_type={gpu_type: self.free_gpus} if gpu_type and self.free_gpus else {},
            total_cpus=self.total_cpus,
            free_cpus=self.free_cpus,
            free_memory_mib=self.free_memory_mib,
            max_free_gpus_on_node=self.max_free_gpus,
            max_free_cpus_on_node=self.max_free_cpus,
            pending_jobs=pending,
            blocked_pending_jobs=blocked,
            running_jobs=running,
            user_pending_jobs=user_pending,
            user_running_jobs=user_running,
            available=available,
        )


def offline_state(profile: SiteProfile, collected_at: datetime, section: str) -> SiteState:
    """The probe's answer when its main section (`section`) failed: the site is OFFLINE."""
    return SiteState(
        site=profile.name,
        health=Health.OFFLINE,
        collected_at=collected_at,
        error=f"probe section failed: {section}",
    )


def probe_state(
    profile: SiteProfile,
    collected_at: datetime,
    health: Health,
    failed: Sequence[str],
    *,
    partitions: Iterable[PartitionState],
    accounts: Iterable[str],
) -> SiteState:
    """The probe's answer, naming the sections that failed (`health_of`'s second value)."""
    return SiteState(
        site=profile.name,
        health=health,
        collected_at=collected_at,
        arch=profile.arch,
        partitions=tuple(partitions),
        accounts=tuple(accounts),
        error=f"probe sections failed: {', '.join(failed)}" if failed else None,
    )
