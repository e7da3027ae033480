"""PBS Pro output parsers: qstat -f -F json jobs (with subjobs), pbsnodes and queue JSON."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, tzinfo
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
from fedhpc.domain.site import PartitionState, SiteProfile, SiteState
from fedhpc.errors import TransientError

__all__ = [
    "STATE_TABLE",
    "finished_state",
    "map_state",
    "parse_accounting",
    "parse_probe",
    "parse_status",
    "queue_selectors",
]

# Job states, qstat(1B) "The job's state" (OpenPBS doc/man1/qstat.1B). A letter whose meaning
# depends on the exit status (F finished, X finished subjob) maps to None: see finished_state.
STATE_TABLE: dict[str, JobState | None] = {
    "Q": JobState.PENDING,  # queued
    "H": JobState.PENDING,  # held
    "W": JobState.PENDING,  # waiting for its start time (qsub -a) or stage-in
    "T": JobState.PENDING,  # being moved to a new location
    "M": JobState.PENDING,  # moved to another server (peer scheduling): not started here
    "U": JobState.PENDING,  # cycle-harvesting job suspended by keyboard activity, not started
    # S: suspended after it started. Our transition table never goes back to pending, and the
    # job holds its nodes, so it stays running.
    "S": JobState.RUNNING,
    "R": JobState.RUNNING,
    "B": JobState.RUNNING,  # array with at least one subjob running
    # E: exiting after having run: final data (Exit_status) not yet there. Not terminal for
    # our job, but the probe counts it neither running nor pending (_EXITING below).
    "E": JobState.RUNNING,
    "F": None,  # finished (history, qstat -x)
    "X": None,  # subjob finished or deleted
}

# Exit_status conventions (PBS Pro Admin Guide "Job Exit Status Codes"; pbs_job.h JOB_EXEC_*):
# 0 success; negative = PBS-level end; > 256 = killed by signal (256 + signo).
_KILL_WALLTIME = -29  # JOB_EXEC_KILL_WALLTIME
_SIGNALLED = 256
_SUBSTATE_TERMINATED = 91  # JOB_SUBSTATE_TERMINATED: finished by qdel (pbs_job.h)


def finished_state(job: dict[str, Any]) -> JobState:
    """F/X jobs: completed, timeout, cancelled or failed, from Exit_status and substate."""
    raw = job.get("Exit_status")
    status = as_int(raw) if raw is not None else None
    comment = str(job.get("comment", "")).lower()
    if status == _KILL_WALLTIME or (
        status is not None and status > _SIGNALLED and "walltime" in comment
    ):
        return JobState.TIMEOUT
    if as_int(job.get("substate")) == _SUBSTATE_TERMINATED:
        # Before Exit_status 0: OpenPBS 23.06 reports 0 for a job qdel'd just as it started.
        return JobState.CANCELLED
    if status == 0:
        return JobState.COMPLETED
    if status is None:
        # Never reported an exit status: deleted before it ran.
        return JobState.CANCELLED if "stime" not in job else JobState.FAILED
    if status > _SIGNALLED and status - _SIGNALLED in (2, 9, 15):
        return JobState.CANCELLED  # SIGINT/SIGKILL/SIGTERM: what qdel sends
    return JobState.FAILED


def map_state(job: dict[str, Any]) -> JobState:
    letter = str(job.get("job_state", "")).strip()
    mapped = STATE_TABLE.get(letter, JobState.PENDING if letter else JobState.SUBMITTED)
    return finished_state(job) if mapped is None else mapped


# '123.server', array parent '123[].server', subjob '123[4].server'.
_ID = re.compile(r"^(?P<seq>\d+)(?:\[(?P<idx>\d*)\])?(?P<rest>(?:\.\S+)?)$")


def _split(job_id: str) -> tuple[str, str | None, bool]:
    """(parent id, element index, is array parent) for one qstat key."""
    m = _ID.match(job_id)
    if not m or m.group("idx") is None:
        return job_id, None, False
    parent = f"{m.group('seq')}[]{m.group('rest')}"
    idx = m.group("idx")
    return parent, (idx or None), not idx


def _jobs(result: CommandResult) -> dict[str, dict[str, Any]]:
    data = load_json(result.stdout)
    if data is None:
        # qstat exits non-zero when some ids are unknown yet still prints the rest; only
        # a failure with no JSON at all is an error. Forgotten jobs are simply absent.
        if (
            result.returncode != 0
            and "unknown job id" not in error_text(result, last_line_only=False).lower()
        ):
            raise TransientError(f"qstat failed: {error_text(result, last_line_only=False)}")
        return {}
    jobs = data.get("Jobs", {})  # absent when nothing matched
    return jobs if isinstance(jobs, dict) else {}


def _rows(
    result: CommandResult,
) -> Iterator[tuple[str, str | None, str | None, dict[str, Any]]]:
    """(parent id, index, subjob id, attributes) for each job and subjob. The subjob id is
    qstat's own key ('123[4].server': what qdel takes, `PbsDialect.element_id`). An array
    parent is yielded only when no subjob of it is listed (qstat without -t); its index is
    then the pending range, and it has no subjob id."""
    jobs = _jobs(result)
    with_elements = {_split(k)[0] for k in jobs if _split(k)[1] is not None}
    for key, attrs in jobs.items():
        if not isinstance(attrs, dict):
            continue
        parent, idx, is_parent = _split(key)
        element = key if idx is not None else None
        if is_parent:
            if parent in with_elements:
                continue
            idx = attrs.get("array_indices_remaining") or attrs.get("array_indices_submitted")
        yield parent, (str(idx) if idx else None), element, attrs


def _exit(attrs: dict[str, Any]) -> int | None:
    raw = attrs.get("Exit_status")
    return as_int(raw) if raw is not None else None


def parse_status(result: CommandResult) -> list[JobObservation]:
    out = []
    for parent, idx, element, attrs in _rows(result):
        state = map_state(attrs)
        out.append(
            JobObservation(
                job_id=parent,
                array_index=idx,
                element_id=element,
                state=state,
                native_state=str(attrs.get("job_state", "")),
                reason=None if state is JobState.RUNNING else attrs.get("comment"),
                name=attrs.get("Job_Name"),
                partition=attrs.get("queue"),
                nodes=attrs.get("exec_host"),
                exit_code=_exit(attrs),
            )
        )
    return out


def pbs_time(value: object, tz: tzinfo) -> datetime | None:
    """'Thu Nov 27 10:00:00 2025' (server local time, ctime(3) layout) or epoch -> aware UTC."""
    if isinstance(value, int) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, UTC)
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        naive = datetime.strptime(value.strip(), "%a %b %d %H:%M:%S %Y")
    except ValueError:
        return None
    return naive.replace(tzinfo=tz).astimezone(UTC)


def _hms(value: object) -> int | None:
    if not isinstance(value, str) or not re.match(r"^\d+:\d{2}:\d{2}$", value):
        return None
    h, m, s = (int(p) for p in value.split(":"))
    return h * 3600 + m * 60 + s


def parse_accounting(result: CommandResult, tz: tzinfo) -> list[AccountingRecord]:
    out = []
    for parent, idx, element, attrs in _rows(result):
        state = map_state(attrs)
        used = attrs.get("resources_used", {})
        asked = attrs.get("Resource_List", {})
        project = attrs.get("project")
        account = attrs.get("Account_Name") or (
            project if project and project != "_pbs_project_default" else None
        )
        end = None
        if state.terminal:
            end = pbs_time(attrs.get("obittime") or attrs.get("mtime"), tz)
        tres = {
            k: str(asked[k]) for k in ("select", "ncpus", "ngpus", "nodect", "mem") if k in asked
        }
        out.append(
            AccountingRecord(
                job_id=parent,
                array_index=idx,
                element_id=element,
                name=attrs.get("Job_Name"),
                account=account,
                partition=attrs.get("queue"),
                state=state,
                native_state=str(attrs.get("job_state", "")),
                submit=pbs_time(attrs.get("qtime") or attrs.get("ctime"), tz),
                eligible=pbs_time(attrs.get("etime"), tz),
                start=pbs_time(attrs.get("stime"), tz),
                end=end,
                elapsed_s=_hms(used.get("walltime")) if isinstance(used, dict) else None,
                exit_code=_exit(attrs),
                alloc_tres=tres,
            )
        )
    return out


# pbsnodes(8B) node states (OpenPBS doc "Vnode States"); a node may list several, comma-joined.
_DOWN = frozenset({"down", "state-unknown", "stale", "unresolvable", "unknown"})
_DRAIN = frozenset({"offline"})  # taken out by an admin (pbsnodes -o): Slurm's "drain"
_FULL = frozenset({"job-exclusive", "resv-exclusive", "job-busy"})


def node_bucket(node: dict[str, Any]) -> str:
    states = {s.strip() for s in str(node.get("state", "")).split(",")}
    if states & _DOWN:
        return "down"
    if states & _DRAIN:
        return "drain"
    if states & _FULL:
        return "allocated"
    if states == {"free"}:
        busy = node.get("resources_assigned", {}) or {}
        used = as_int(busy.get("ncpus")) + as_int(busy.get("ngpus"))
        return "mixed" if used or node.get("jobs") else "idle"
    return "other"  # busy (load), provisioning, sleep, maintenance, ...


def queue_selectors(queue: dict[str, Any]) -> dict[str, str]:
    """String-valued default_chunk entries (e.g. Qlist) that bind a queue to tagged nodes."""
    chunk = queue.get("default_chunk", {}) or {}
    return {k: v for k, v in chunk.items() if isinstance(v, str)}


def in_queue(node: dict[str, Any], queue: str, selectors: dict[str, str]) -> bool:
    """A vnode serves a queue if its `queue` attribute names it, its resources match the
    queue's default_chunk selectors, or (untagged) it serves every queue. A vnode that offers
    no CPUs serves none: the natural vnode of a multi-vnode host (HPE/Cray, or OpenPBS's
    `pbs_mom -s insert` vnodes as on devpolaris) has ncpus 0 and runs no job."""
    avail = node.get("resources_available", {}) or {}
    if "ncpus" in avail and as_int(avail.get("ncpus")) == 0:
        return False
    if node.get("queue"):
        return bool(node["queue"] == queue)
    if selectors:
        return all(v in str(avail.get(k, "")).split(",") for k, v in selectors.items())
    if "Qlist" in avail:
        return queue in str(avail["Qlist"]).split(",")
    return True


# E (Exiting): "The job has finished, with or without errors, and PBS is cleaning up
# post-execution" (OpenPBS doc/man1/pbs_job_attributes.7B, job_state). Its vnodes stay assigned
# until MoM has cleaned up (same page, release_nodes_on_stageout: by default "job's vnodes are
# released when the job finishes and MoM cleans up the job"), so pbsnodes still shows its GPUs
# taken: it frees nothing yet. But it runs no work and no one waits behind it, so the probe
# counts it neither running nor pending, as Slurm's COMPLETING (slurm_probe._queue_counts).
# PBS's scheduler does the same for run limits: it counts them over its running jobs and keeps
# the exiting ones apart (OpenPBS src/scheduler/server_info.cpp, query_server).
_EXITING = "E"


def _state_counts(text: str) -> tuple[int, int, int]:
    """(pending, running, blocked) from a queue's state_count 'Transit:0 Queued:3 Held:1 ...'.
    Held (holds, dependencies) and Waiting (a start time) jobs are pending but cannot start
    whatever is free: blocked. Exiting jobs are neither pending nor running (_EXITING)."""
    counts = {k: as_int(v) for k, _, v in (p.partition(":") for p in text.split())}
    pending = sum(counts.get(k, 0) for k in ("Transit", "Queued", "Held", "Waiting"))
    running = sum(counts.get(k, 0) for k in ("Running", "Begun"))
    return pending, running, counts.get("Held", 0) + counts.get("Waiting", 0)


def _subjob_counts(attrs: dict[str, Any]) -> tuple[int, int] | None:
    """(queued, running) subjobs of an array job from its `array_state_count` ('Queued:3
    Running:1 Exiting:0 Expired:0'); None for any other job. qstat lists an array once, but
    PBS's per-user limits count each subjob: `max_queued` refuses an array of 5 under a limit of
    3, and takes an array of 2 and one job, then refuses the next job (OpenPBS 23.06 on the dev
    federation, 2026-12-06); `max_run` counts running subjobs."""
    if str(attrs.get("array", "")).lower() != "true" or "array_state_count" not in attrs:
        return None
    counts = {
        k: as_int(v) for k, _, v in (p.partition(":") for p in attrs["array_state_count"].split())
    }
    return counts.get("Queued", 0), counts.get("Running", 0)


def _user_counts(sec: BatchSection | None, queue: str) -> tuple[int, int, list[str]]:
    data = load_json(sec.stdout) if sec and sec.returncode == 0 else None
    jobs = (data or {}).get("Jobs", {}) or {}
    pending = running = 0
    accounts: list[str] = []
    for attrs in jobs.values():
        if attrs.get("Account_Name") and attrs["Account_Name"] not in accounts:
            accounts.append(attrs["Account_Name"])
        if attrs.get("queue") != queue or str(attrs.get("job_state", "")).strip() == _EXITING:
            continue
        if subjobs := _subjob_counts(attrs):
            pending, running = pending + subjobs[0], running + subjobs[1]
            continue
        state = map_state(attrs)
        pending += state is JobState.PENDING
        running += state is JobState.RUNNING
    return pending, running, accounts


def _partition(
    name: str,
    nodes: list[dict[str, Any]],
    queue: dict[str, Any] | None,
    jobs: BatchSection | None,
    gpu_type: str | None,
) -> tuple[PartitionState, list[str]]:
    tally = HostTally()
    for node in nodes:
        avail = node.get("resources_available", {}) or {}
        busy = node.get("resources_assigned", {}) or {}
        tally.add(
            node_bucket(node),
            cpus=as_int(avail.get("ncpus")),
            cpus_used=as_int(busy.get("ncpus")),
            gpus=as_int(avail.get("ngpus")),
            gpus_used=as_int(busy.get("ngpus")),
            free_mib=max(0, size_mib(avail.get("mem")) - size_mib(busy.get("mem"))),
        )
    pending, running, blocked = _state_counts(str((queue or {}).get("state_count", "")))
    user_pending, user_running, accounts = _user_counts(jobs, name)
    available = queue is not None and all(
        str(queue.get(k, "True")) == "True" for k in ("enabled", "started")
    )
    state = tally.partition(
        name,
        gpu_type,
        pending=pending,
        blocked=blocked,
        running=running,
        user_pending=user_pending,
        user_running=user_running,
        available=available,
    )
    return state, accounts


def parse_probe(
    sections: dict[str, BatchSection], profile: SiteProfile, user: str, collected_at: datetime
) -> SiteState:
    """The probe's sections as a SiteState. `user` goes unread: the probe's qstat already
    asked for that user's jobs only."""
    wanted = ["queues", "jobs"] + (["balance"] if profile.conventions.balance_command else [])
    health, failed = health_of(sections, "nodes", wanted)
    nodes_data = load_json(sections["nodes"].stdout) if "nodes" not in failed else None
    if nodes_data is None:
        return offline_state(profile, collected_at, "nodes")
    nodes = [n for n in (nodes_data.get("nodes", {}) or {}).values() if isinstance(n, dict)]
    queues_data = load_json(sections["queues"].stdout) if "queues" not in failed else None
    queues = (queues_data or {}).get("Queue", {}) or {}
    partitions: list[PartitionState] = []
    accounts: list[str] = []
    for spec in profile.partitions:
        queue = queues.get(spec.name)
        selectors = queue_selectors(queue or {})
        members = [n for n in nodes if in_queue(n, spec.name, selectors)]
        accel = spec.node.accelerator
        state, found = _partition(
            spec.name, members, queue, sections.get("jobs"), accel.type if accel else None
        )
        if queues_data is None:  # unknown, not closed: keep the queue placeable
            state = state.model_copy(update={"available": True})
        partitions.append(state)
        accounts.extend(a for a in found if a not in accounts)
    return probe_state(
        profile, collected_at, health, failed, partitions=partitions, accounts=accounts
    )
