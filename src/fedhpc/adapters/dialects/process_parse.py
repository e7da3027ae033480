"""Parsers for the local-process scheduler's JSON output (queue, acct, find, probe)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from fedhpc.adapters.command import BatchSection, CommandResult
from fedhpc.adapters.dialects.common import error_text
from fedhpc.adapters.dialects.slurm_probe import parse_balances
from fedhpc.domain.job import AccountingRecord, JobObservation, JobState
from fedhpc.domain.site import (
    Credit,
    Health,
    NodeStateCounts,
    PartitionState,
    SiteProfile,
    SiteState,
)

__all__ = [
    "STATE_MAP",
    "parse_acct",
    "parse_find",
    "parse_probe",
    "parse_queue",
]

# The local-process scheduler's states are Slurm's names for the same things.
STATE_MAP: dict[str, JobState] = {
    "PENDING": JobState.PENDING,
    "RUNNING": JobState.RUNNING,
    "COMPLETED": JobState.COMPLETED,
    "FAILED": JobState.FAILED,
    "CANCELLED": JobState.CANCELLED,
    "TIMEOUT": JobState.TIMEOUT,
}


def _rows(result: CommandResult, verb: str) -> list[dict[str, Any]]:
    if not result.ok:
        raise ValueError(f"localsched {verb} failed: {error_text(result, last_line_only=True)}")
    data = json.loads(result.stdout or "[]")
    if not isinstance(data, list):
        raise ValueError(f"localsched {verb} printed {type(data).__name__}, not a list")
    return [row for row in data if isinstance(row, dict)]


def _state(native: object) -> JobState:
    return STATE_MAP.get(str(native), JobState.PENDING)


def _time(value: object) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) and value else None


def _str(value: object) -> str | None:
    return str(value) if value not in (None, "") else None


def parse_queue(result: CommandResult) -> list[JobObservation]:
    return [
        JobObservation(
            job_id=str(row["id"]),
            state=_state(row.get("state")),
            native_state=str(row.get("state")),
            reason=_str(row.get("reason")),
            name=_str(row.get("name")),
            partition=_str(row.get("partition")),
            nodes=_str(row.get("nodes")),
        )
        for row in _rows(result, "queue")
    ]


def parse_acct(result: CommandResult) -> list[AccountingRecord]:
    out = []
    for row in _rows(result, "acct"):
        elapsed = row.get("elapsed_s")
        exit_code = row.get("exit_code")
        out.append(
            AccountingRecord(
                job_id=str(row["id"]),
                name=_str(row.get("name")),
                account=_str(row.get("account")),
                partition=_str(row.get("partition")),
                state=_state(row.get("state")),
                native_state=str(row.get("state")),
                submit=_time(row.get("submit")),
                eligible=_time(row.get("eligible")),
                start=_time(row.get("start")),
                end=_time(row.get("end")),
                elapsed_s=int(elapsed) if isinstance(elapsed, int | float) else None,
                exit_code=exit_code if isinstance(exit_code, int) else None,
                alloc_tres={str(k): str(v) for k, v in (row.get("alloc_tres") or {}).items()},
            )
        )
    return out


def parse_find(result: CommandResult) -> dict[str, str]:
    found: dict[str, str] = {}
    for row in _rows(result, "find"):
        found.setdefault(str(row["name"]), str(row["id"]))
    return found


def _partition(row: dict[str, Any]) -> PartitionState:
    nodes = row.get("nodes") or {}
    gpu_type = row.get("gpu_type")
    free_gpus = int(row.get("free_gpus", 0))
    return PartitionState(
        name=str(row["name"]),
        nodes=NodeStateCounts(**{k: int(nodes.get(k, 0)) for k in NodeStateCounts.model_fields}),
        total_gpus=int(row.get("total_gpus", 0)),
        free_gpus=free_gpus,
        free_gpus_by_type={str(gpu_type): free_gpus} if gpu_type else {},
        total_cpus=int(row.get("total_cpus", 0)),
        free_cpus=int(row.get("free_cpus", 0)),
        free_memory_mib=int(row.get("free_memory_mib", 0)),
        max_free_gpus_on_node=int(row.get("max_free_gpus_on_node", 0)),
        max_free_cpus_on_node=int(row.get("max_free_cpus_on_node", 0)),
        pending_jobs=int(row.get("pending", 0)),
        running_jobs=int(row.get("running", 0)),
        user_pending_jobs=int(row.get("user_pending", 0)),
        user_running_jobs=int(row.get("user_running", 0)),
        available=True,
    )


def parse_probe(
    sections: dict[str, BatchSection], profile: SiteProfile, user: str, collected_at: datetime
) -> SiteState:
    """The `probe` section (JSON) as a SiteState shaped like the Slurm probe's. `user` goes
    unread: the probe command already carried it to localsched."""
    sec = sections.get("probe")
    if sec is None or sec.returncode != 0:
        return SiteState(
            site=profile.name,
            health=Health.OFFLINE,
            collected_at=collected_at,
            error="probe sections failed: probe",
        )
    try:
        data = json.loads(sec.stdout)
        rows = {str(r["name"]): _partition(r) for r in data["partitions"]}
    except (ValueError, KeyError, TypeError) as exc:
        return SiteState(
            site=profile.name,
            health=Health.OFFLINE,
            collected_at=collected_at,
            error=f"unreadable localsched probe: {exc}",
        )
    unit = profile.charge.unit
    usage = data.get("usage_cpu_s") or {}
    accounts = tuple(str(a) for a in data.get("accounts") or ())
    credit = tuple(Credit(account=a, used=usage.get(a, 0) / 3600.0, unit=unit) for a in accounts)
    error = None
    balance = sections.get("balance")
    if profile.conventions.balance_command:
        if balance is None or balance.returncode != 0:
            error = "probe sections failed: balance"
        else:
            found = parse_balances(balance.stdout)
            credit = tuple(c.model_copy(update={"balance": found.get(c.account)}) for c in credit)
    partitions = tuple(
        rows.get(p.name, PartitionState(name=p.name, available=False)) for p in profile.partitions
    )
    missing = [p.name for p in profile.partitions if p.name not in rows]
    if missing and error is None:
        error = f"partitions missing from the probe: {', '.join(missing)}"
    return SiteState(
        site=profile.name,
        health=Health.DEGRADED if error else Health.OK,
        collected_at=collected_at,
        arch=profile.arch,
        partitions=partitions,
        accounts=accounts,
        credit=credit,
        error=error,
    )
