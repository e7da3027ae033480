"""IBM Spectrum LSF output parsers: bjobs/bhosts/bqueues -json, bqueues -l, bmgroup, lsload."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from fedhpc.adapters.command import BatchSection, CommandResult
from fedhpc.adapters.dialects.common import error_text
from fedhpc.adapters.dialects.pbs_lsf_util import (
    HostTally,
    as_int,
    health_of,
    load_json,
    offline_state,
    probe_state,
    size_mib,
)
from fedhpc.domain.job import AccountingRecord, JobObservation, JobState
from fedhpc.domain.site import Health, PartitionState, SiteProfile, SiteState
from fedhpc.errors import TransientError

__all__ = [
    "STATE_TABLE",
    "element_of",
    "exit_state",
    "group_members",
    "hosts_per_queue",
    "lsf_time",
    "map_state",
    "parse_accounting",
    "parse_probe",
    "parse_status",
    "section_rows",
]

# bjobs(1) "Job status" (IBM Spectrum LSF 10.1 command reference). EXIT maps to None: its
# meaning depends on the exit reason, see exit_state.
STATE_TABLE: dict[str, JobState | None] = {
    "PEND": JobState.PENDING,
    "PSUSP": JobState.PENDING,  # suspended by its owner or an admin while pending
    "WAIT": JobState.PENDING,  # chunk-job member waiting to run
    "PROV": JobState.PENDING,  # dispatched, hosts still being provisioned
    "RUN": JobState.RUNNING,
    # Suspended after starting: it holds its slots and never returns to pending in our model.
    "USUSP": JobState.RUNNING,
    "SSUSP": JobState.RUNNING,
    "UNKWN": JobState.RUNNING,  # mbatchd lost contact with sbatchd; the job may still run
    "ZOMBI": JobState.RUNNING,  # being killed, not yet confirmed: final state comes later
    "DONE": JobState.COMPLETED,  # exit status 0
    "EXIT": None,
}
# No LSF state is PBS's E or Slurm's COMPLETING (a job that has ended, cleanup running). A job's
# post-execution command (bsub -Ep, POST_EXEC) runs after it is DONE or EXIT, and LSF releases
# its slots at that point; POST_DONE/POST_ERR are post-processing outcomes in bhist and in
# `bsub -w` dependencies, never a bjobs STAT. With JOB_INCLUDE_POSTPROC the job stays RUN and
# holds its slot until post-execution ends: LSF itself counts it running, and bjobs shows
# nothing else. (IBM Spectrum LSF 10.1, "About pre- and post-execution processing" and
# "Pre- and post-execution processing commands".) So the probe counts DONE/EXIT as neither.

# Exit reasons (bjobs -o exit_reason; "Termination reasons" in bacct(1)). Killed by bkill
# from its owner or an admin -> cancelled; run limit -> timeout; anything else -> failed.
_CANCELLED = ("TERM_OWNER", "TERM_ADMIN", "TERM_FORCE_OWNER", "TERM_FORCE_ADMIN")
_TIMEOUT = ("TERM_RUNLIMIT",)
_SIGINT_EXIT = 130  # 128 + SIGINT: the first signal bkill sends (bkill(1))


def exit_state(reason: str, exit_code: int | None) -> JobState:
    code = reason.split(":", 1)[0].strip().upper()
    if code in _TIMEOUT:
        return JobState.TIMEOUT
    if code in _CANCELLED:
        return JobState.CANCELLED
    if code:
        return JobState.FAILED
    if exit_code is None or exit_code == _SIGINT_EXIT:
        return JobState.CANCELLED  # killed before it ran, or by bkill without a reason shown
    return JobState.FAILED


def _exit_code(raw: object) -> int | None:
    text = str(raw or "").strip()
    return int(text) if text.lstrip("-").isdigit() else None


def map_state(record: dict[str, Any]) -> JobState:
    stat = str(record.get("STAT", "")).strip()
    mapped = STATE_TABLE.get(stat, JobState.PENDING)
    if mapped is not None:
        return mapped
    return exit_state(str(record.get("EXIT_REASON") or ""), _exit_code(record.get("EXIT_CODE")))


def _records(result: CommandResult) -> list[dict[str, Any]]:
    data = load_json(result.stdout)
    if data is None:
        text = error_text(result, last_line_only=False).lower()
        forgotten = ("is not found", "no job found", "no unfinished job found")
        if result.returncode != 0 and not any(f in text for f in forgotten):
            raise TransientError(f"bjobs failed: {error_text(result, last_line_only=False)}")
        return []
    records = data.get("RECORDS", [])
    # A job bjobs forgot comes back as {"JOBID": ..., "ERROR": "Job <1> is not found"}.
    return [r for r in records if isinstance(r, dict) and "ERROR" not in r]


_ELEMENT = re.compile(r"^(\d+)\[(\d+)\]$")


def split_id(record: dict[str, Any]) -> tuple[str, str | None]:
    """(job id, element index): JOBID may be '123[4]', or '123' with JOBINDEX '4' (0: none).
    An element's own id is '123[4]' (`LsfDialect.element_id`, `element_of`)."""
    raw = str(record.get("JOBID", "")).strip()
    m = _ELEMENT.match(raw)
    if m:
        return m.group(1), m.group(2)
    index = str(record.get("JOBINDEX", "")).strip()
    return raw, (index if index.isdigit() and index != "0" else None)


def element_of(job_id: str, index: str | None) -> str | None:
    """An element's id as bjobs and bkill take it, '123[4]'; None for a job of its own."""
    return None if index is None else f"{job_id}[{index}]"


def _opt(record: dict[str, Any], key: str) -> str | None:
    value = str(record.get(key) or "").strip()
    return value if value and value != "-" else None


def parse_status(result: CommandResult) -> list[JobObservation]:
    out = []
    for rec in _records(result):
        job_id, index = split_id(rec)
        state = map_state(rec)
        reason = _opt(rec, "PEND_REASON") if state is JobState.PENDING else _opt(rec, "EXIT_REASON")
        out.append(
            JobObservation(
                job_id=job_id,
                array_index=index,
                element_id=element_of(job_id, index),
                state=state,
                native_state=str(rec.get("STAT", "")),
                reason=reason.rstrip(";") if reason else None,
                name=_opt(rec, "JOB_NAME"),
                partition=_opt(rec, "QUEUE"),
                nodes=_opt(rec, "EXEC_HOST"),
                exit_code=_exit_code(rec.get("EXIT_CODE")) if state.terminal else None,
            )
        )
    return out


# bjobs -o time stamps: 'Dec 28 19:56', maybe with seconds and a year, then an optional flag:
# E estimated, L from a run limit, X exceeded (bjobs -WF). No year unless the site shows it.
_TIME = re.compile(
    r"^(?P<mon>[A-Z][a-z]{2})\s+(?P<day>\d{1,2})\s+(?P<h>\d{1,2}):(?P<mi>\d{2})(?::(?P<s>\d{2}))?"
    r"(?:\s+(?P<y>\d{4}))?(?:\s+[ELX])?$"
)
_MONTH_NAMES = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_MONTHS = {m: i for i, m in enumerate(_MONTH_NAMES, 1)}


def lsf_time(value: object, tz: tzinfo, now: datetime | None) -> datetime | None:
    """A bjobs time stamp as aware UTC. Without a printed year the latest year that puts the
    stamp no later than `now` (+1 day of clock skew) is taken; without `now` it is unknown."""
    m = _TIME.match(str(value or "").strip())
    if not m or m.group("mon") not in _MONTHS:
        return None
    month, day = _MONTHS[m.group("mon")], int(m.group("day"))
    h, mi, s = int(m.group("h")), int(m.group("mi")), int(m.group("s") or 0)
    if m.group("y"):
        years = [int(m.group("y"))]
    elif now is not None:
        local_now = now.astimezone(tz)
        years = [local_now.year, local_now.year - 1, local_now.year - 4]  # Feb 29 needs -4
    else:
        return None
    for year in years:
        try:
            stamp = datetime(year, month, day, h, mi, s, tzinfo=tz).astimezone(UTC)
        except ValueError:
            continue
        if m.group("y") or now is None or stamp <= now + timedelta(days=1):
            return stamp
    return None


def _seconds(value: object) -> int | None:
    """bjobs run_time: '57208 second(s)' or, with -hms, 'HH:MM:SS'."""
    text = str(value or "").strip()
    if m := re.match(r"^(\d+) second", text):
        return int(m.group(1))
    if re.match(r"^\d+:\d{2}:\d{2}$", text):
        h, mi, s = (int(p) for p in text.split(":"))
        return h * 3600 + mi * 60 + s
    return None


def parse_accounting(
    result: CommandResult, tz: tzinfo, now: datetime | None
) -> list[AccountingRecord]:
    out = []
    for rec in _records(result):
        job_id, index = split_id(rec)
        state = map_state(rec)
        tres = {k.lower(): v for k in ("SLOTS", "EXEC_HOST") if (v := _opt(rec, k))}
        out.append(
            AccountingRecord(
                job_id=job_id,
                array_index=index,
                element_id=element_of(job_id, index),
                name=_opt(rec, "JOB_NAME"),
                account=_opt(rec, "PROJ_NAME"),
                partition=_opt(rec, "QUEUE"),
                state=state,
                native_state=str(rec.get("STAT", "")),
                submit=lsf_time(rec.get("SUBMIT_TIME"), tz, now),
                start=lsf_time(rec.get("START_TIME"), tz, now),
                # A running job's FINISH_TIME is a forecast from its run limit: not an end.
                end=lsf_time(rec.get("FINISH_TIME"), tz, now) if state.terminal else None,
                elapsed_s=_seconds(rec.get("RUN_TIME")),
                exit_code=_exit_code(rec.get("EXIT_CODE")) if state.terminal else None,
                alloc_tres=tres,
            )
        )
    return out


# bhosts(1) host STATUS values -> node buckets.
_BUCKETS = {
    "closed_full": "allocated",  # every slot in use
    "closed_excl": "allocated",  # running an exclusive job
    "closed_cu_excl": "allocated",
    "closed_adm": "drain",  # closed by an admin (badmin hclose)
    "closed_lock": "drain",  # locked (lsadmin limlock)
    "unavail": "down",
    "unreach": "down",
    "closed_lim": "down",  # LIM unreachable
}


def section_rows(sec: BatchSection | None) -> Iterator[dict[str, Any]]:
    data = load_json(sec.stdout) if sec is not None else None
    for rec in (data or {}).get("RECORDS", []) or []:
        if isinstance(rec, dict) and "ERROR" not in rec:
            yield rec


def _table(sec: BatchSection | None) -> Iterator[list[str]]:
    """Whitespace columns of a text report, header line dropped."""
    for line in (sec.stdout if sec else "").splitlines()[1:]:
        if line.strip():
            yield line.split()


def hosts_per_queue(sec: BatchSection | None) -> dict[str, list[str]]:
    """bqueues -l: the HOSTS line of each 'QUEUE: name' block."""
    out: dict[str, list[str]] = {}
    current = None
    for line in (sec.stdout if sec else "").splitlines():
        if line.startswith("QUEUE:"):
            current = line.split(":", 1)[1].strip()
        elif current and line.strip().startswith("HOSTS:"):
            out[current] = line.split(":", 1)[1].split()
    return out


def group_members(tokens: list[str], hosts: list[str], groups: dict[str, list[str]]) -> set[str]:
    """Resolve a queue's HOSTS tokens (lsb.queues HOSTS): names, 'group/', 'all', 'others',
    '~excluded', 'name+pref'. Remote ('@cluster') tokens are ignored."""

    def expand(token: str, depth: int = 0) -> set[str]:
        name = token.split("+", 1)[0]
        if name in ("all", "others"):
            return set(hosts)
        if name.endswith("/"):
            if depth > 8:
                return set()
            return set().union(*(expand(t, depth + 1) for t in groups.get(name[:-1], [])))
        return {name} if "@" not in name else set()

    keep: set[str] = set()
    drop: set[str] = set()
    for token in tokens:
        if token.startswith("~"):
            drop |= expand(token[1:])
        else:
            keep |= expand(token)
    return keep - drop


def _section_ok(sec: BatchSection | None) -> bool:
    # Some LSF commands exit non-zero while still printing the rest (an unknown queue name).
    return sec is not None and (sec.returncode == 0 or bool(sec.stdout.strip()))


def parse_probe(
    sections: dict[str, BatchSection], profile: SiteProfile, user: str, collected_at: datetime
) -> SiteState:
    wanted = ["gpus", "queues", "queuehosts", "groups", "load", "jobs"]
    wanted += ["balance"] if profile.conventions.balance_command else []
    health, failed = health_of(sections, "hosts", wanted, _section_ok)
    hosts = {str(r.get("HOST_NAME")): r for r in section_rows(sections.get("hosts"))}
    if health is Health.OFFLINE or not hosts:
        return offline_state(profile, collected_at, "hosts")
    gpus = {str(r.get("HOST_NAME")): r for r in section_rows(sections.get("gpus"))}
    queues = {str(r.get("QUEUE_NAME")): r for r in section_rows(sections.get("queues"))}
    free_mem = {
        row[0]: size_mib(row[2], bare_unit="m")
        for row in _table(sections.get("load"))
        if len(row) >= 3
    }
    groups = {row[0]: row[1:] for row in _table(sections.get("groups"))}
    queue_hosts = hosts_per_queue(sections.get("queuehosts"))
    jobs = list(section_rows(sections.get("jobs")))
    names = list(hosts)
    partitions = []
    for spec in profile.partitions:
        tokens = queue_hosts.get(spec.name)
        members = group_members(tokens, names, groups) if tokens is not None else set(names)
        accel = spec.node.accelerator
        queue = queues.get(spec.name)
        state = _partition(
            spec.name,
            [hosts[h] for h in names if h in members],
            gpus=gpus,
            free_mem=free_mem,
            jobs=jobs,
            user=user,
            gpu_type=accel.type if accel else None,
        )
        # An unlisted queue is closed; with no bqueues answer at all we cannot tell.
        available = str(queue.get("STATUS", "")) == "Open:Active" if queue else not queues
        partitions.append(state.model_copy(update={"available": available}))
    accounts: list[str] = []
    for rec in jobs:
        proj = _opt(rec, "PROJ_NAME")
        if rec.get("USER") == user and proj and proj != "default" and proj not in accounts:
            accounts.append(proj)
    return probe_state(
        profile, collected_at, health, failed, partitions=partitions, accounts=accounts
    )


def _partition(
    name: str,
    hosts: list[dict[str, Any]],
    *,
    gpus: dict[str, dict[str, Any]],
    free_mem: dict[str, int],
    jobs: list[dict[str, Any]],
    user: str,
    gpu_type: str | None,
) -> PartitionState:
    tally = HostTally()
    for host in hosts:
        status = str(host.get("STATUS", "")).strip()
        used = as_int(host.get("NJOBS"))  # slots held by running, suspended and reserving jobs
        if status == "ok":
            bucket = "mixed" if used else "idle"
        else:
            bucket = _BUCKETS.get(status.lower(), "other")
        gpu = gpus.get(str(host.get("HOST_NAME")), {})
        tally.add(
            bucket,
            cpus=as_int(host.get("MAX")),  # '-' (no limit) reads as 0: nothing we can count on
            cpus_used=used,
            gpus=as_int(gpu.get("NGPUS")),
            gpus_used=as_int(gpu.get("NGPUS_ALLOC")),
            free_mib=free_mem.get(str(host.get("HOST_NAME")), 0),
        )
    counts = dict.fromkeys(("p", "r", "up", "ur", "b"), 0)
    for rec in jobs:
        if rec.get("QUEUE") != name:
            continue
        state = STATE_TABLE.get(str(rec.get("STAT", "")))
        kind = "p" if state is JobState.PENDING else "r" if state is JobState.RUNNING else None
        if kind:
            counts[kind] += 1
            counts["u" + kind] += rec.get("USER") == user
        counts["b"] += rec.get("STAT") == "PSUSP"  # suspended while pending: not ahead of anyone
    return tally.partition(
        name,
        gpu_type,
        pending=counts["p"],
        blocked=counts["b"],
        running=counts["r"],
        user_pending=counts["up"],
        user_running=counts["ur"],
    )
