"""Parsers for Slurm's job output (squeue -o, sacct --parsable2, sbatch --test-only)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from fedhpc.adapters.command import CommandResult, iter_lines
from fedhpc.adapters.dialects.base import SchedulerRejected
from fedhpc.adapters.dialects.common import error_text
from fedhpc.domain.job import AccountingRecord, JobObservation, JobState

__all__ = [
    "StartPrediction",
    "iter_sacct",
    "iter_sacct_lines",
    "map_state",
    "none_if_blank",
    "parse_sacct",
    "parse_squeue",
    "parse_test_only",
]

# squeue(1) "JOB STATE CODES"; sacct(1) "JOB STATE CODES".
STATE_MAP: dict[str, JobState] = {
    "PENDING": JobState.PENDING,
    "REQUEUED": JobState.PENDING,
    "REQUEUE_FED": JobState.PENDING,
    "REQUEUE_HOLD": JobState.PENDING,
    "RESV_DEL_HOLD": JobState.PENDING,
    "SPECIAL_EXIT": JobState.PENDING,
    "CONFIGURING": JobState.RUNNING,
    "RUNNING": JobState.RUNNING,
    "COMPLETING": JobState.RUNNING,
    "SUSPENDED": JobState.RUNNING,
    "STOPPED": JobState.RUNNING,
    "RESIZING": JobState.RUNNING,
    "SIGNALING": JobState.RUNNING,
    "STAGE_OUT": JobState.RUNNING,
    "COMPLETED": JobState.COMPLETED,
    "FAILED": JobState.FAILED,
    "NODE_FAIL": JobState.FAILED,
    "BOOT_FAIL": JobState.FAILED,
    "OUT_OF_MEMORY": JobState.FAILED,
    "PREEMPTED": JobState.FAILED,
    "CANCELLED": JobState.CANCELLED,
    "REVOKED": JobState.CANCELLED,
    "TIMEOUT": JobState.TIMEOUT,
    "DEADLINE": JobState.TIMEOUT,
}

# Pending reasons after which the job can never start as submitted (squeue(1) "JOB REASON CODES").
NEVER_RUNS = frozenset(
    {
        "BadConstraints",
        "PartitionConfig",
        "PartitionNodeLimit",
        "PartitionTimeLimit",
        "AccountNotAllowed",
        "QOSNotAllowed",
        "InvalidAccount",
        "InvalidQOS",
        "DependencyNeverSatisfied",
        "QOSMaxWallDurationPerJobLimit",
        "QOSMaxGRESPerJob",
        "QOSMaxCpuPerJobLimit",
        "QOSMaxNodePerJobLimit",
    }
)


def map_state(native: str, reason: str | None = None) -> JobState:
    """A Slurm state (possibly 'CANCELLED by 0' or 'RUNNING+...') as a JobState."""
    first = native.split(maxsplit=1)[0] if native.strip() else "PENDING"
    word = first.split("+", maxsplit=1)[0].upper()
    state = STATE_MAP.get(word, JobState.PENDING)
    if state is JobState.PENDING and reason in NEVER_RUNS:
        return JobState.UNSCHEDULABLE
    return state


def _split_id(raw: str) -> tuple[str, str | None]:
    """'123' -> ('123', None); '123_4' -> ('123', '4'); '123_[5-9%2]' -> ('123', '[5-9%2]')."""
    job, sep, index = raw.strip().partition("_")
    return job, (index if sep else None)


def _expand(index: str | None) -> list[str | None]:
    """Array elements Slurm folds into one row ('[2-3%2]', '[1,4-6]') as one entry each, so
    an array is never reduced to a single row; anything else is returned as it is."""
    if index is None or not (index.startswith("[") and index.endswith("]")):
        return [index]
    body = index[1:-1].split("%", 1)[0]
    out: list[str | None] = []
    for part in body.split(","):
        lo, _, rest = part.partition("-")
        hi, _, step = rest.partition(":")
        if not lo.isdigit() or (hi and not hi.isdigit()) or (step and not step.isdigit()):
            return [index]
        stop = int(hi) if hi else int(lo)
        out.extend(str(i) for i in range(int(lo), stop + 1, int(step) if step else 1))
    return out


def none_if_blank(value: str) -> str | None:
    v = value.strip()
    return None if v in {"", "(null)", "N/A", "None", "Unknown", "n/a"} else v


def parse_squeue(result: CommandResult) -> list[JobObservation]:
    """Rows of `squeue --array --format=%i|%T|%r|%P|%N|%j`; every array element is kept."""
    if not result.ok:
        # squeue rejects the whole call when every id has left its memory; they are gone.
        if "Invalid job id" in result.stderr:
            return []
        raise ValueError(f"squeue failed: {error_text(result, last_line_only=True)}")
    out: list[JobObservation] = []
    for line in result.stdout.splitlines():
        if not line.strip():
            continue
        raw_id, native, reason, partition, nodes, name = line.split("|", 5)
        job, folded = _split_id(raw_id)
        r = none_if_blank(reason)
        out.extend(
            JobObservation(
                job_id=job,
                array_index=index,
                state=map_state(native, r),
                native_state=native.strip(),
                reason=r,
                name=name,
                partition=none_if_blank(partition),
                nodes=none_if_blank(nodes),
            )
            for index in _expand(folded)
        )
    return out


def _epoch(value: str) -> datetime | None:
    v = none_if_blank(value)
    if v is None or not v.isdigit() or v == "0":
        return None
    try:
        return datetime.fromtimestamp(int(v), tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None  # garbage (past year 9999 or time_t): no time, as for an unreadable one


def _exit_code(value: str) -> int | None:
    code, _, _signal = value.partition(":")
    return int(code) if code.strip().isdigit() else None


def parse_sacct(result: CommandResult) -> list[AccountingRecord]:
    """`sacct --parsable2 --allocations` rows; times are epoch seconds (SLURM_TIME_FORMAT=%s)."""
    return list(iter_sacct(result))


def iter_sacct(
    result: CommandResult, skip_name: Callable[[str], bool] | None = None
) -> Iterator[AccountingRecord]:
    """`parse_sacct` one record at a time: the user's jobs over the learned window can be
    thousands (a sweep's), and none of them need to be held at once. A row whose job name
    `skip_name` refuses is passed over before anything else in it is read (a sweep's own jobs:
    tens of thousands of rows). Raises ValueError on the first `next` when sacct failed."""
    if not result.ok:
        raise ValueError(f"sacct failed: {error_text(result, last_line_only=True)}")
    yield from iter_sacct_lines(iter_lines(result.stdout), skip_name)  # no list of every line


def iter_sacct_lines(
    lines: Iterable[str], skip_name: Callable[[str], bool] | None = None
) -> Iterator[AccountingRecord]:
    """`iter_sacct` over lines of `sacct --parsable2` as they come (a stream's, or one answer's):
    blank and short lines are passed over."""
    for raw in lines:
        line = raw.rstrip("\r")
        if not line.strip():
            continue
        fields = line.split("|", 11)
        if len(fields) < 12:
            continue
        jid, native, account, partition, submit, eligible, start, end, elapsed = fields[:9]
        exit_code, tres, name = fields[9:]
        if skip_name is not None and skip_name(name):
            continue
        job, folded = _split_id(jid)
        for index in _expand(folded):
            yield AccountingRecord(
                job_id=job,
                array_index=index,
                name=name,
                account=none_if_blank(account),
                partition=none_if_blank(partition),
                state=map_state(native),
                native_state=native.strip(),
                submit=_epoch(submit),
                eligible=_epoch(eligible),
                start=_epoch(start),
                end=_epoch(end),
                elapsed_s=int(elapsed) if elapsed.strip().isdigit() else None,
                exit_code=_exit_code(exit_code),
                alloc_tres=dict(kv.split("=", 1) for kv in tres.split(",") if "=" in kv),
            )


@dataclass(frozen=True, slots=True)
class StartPrediction:
    """The scheduler's own estimate of when and where a job would start."""

    start: datetime | None
    partition: str | None
    nodes: str | None = None


# sbatch --test-only prints on stderr, e.g.
# "sbatch: Job 3 to start at 1764437400 using 2 processors on nodes vm in partition cpu"
_TEST_ONLY = re.compile(
    r"to start at (\S+) using (\d+) processors on nodes (\S+) in partition (\S+)"
)


def parse_test_only(result: CommandResult) -> StartPrediction:
    m = _TEST_ONLY.search(result.stderr + result.stdout)
    if not m:
        raise SchedulerRejected(error_text(result, last_line_only=True))
    return StartPrediction(start=_epoch(m.group(1)), partition=m.group(4), nodes=m.group(3))
