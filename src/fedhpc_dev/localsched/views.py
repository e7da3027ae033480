"""Pure pieces at the scheduler's boundary: a script becomes a job record (with its checks),
and jobs become the rows of `queue`, `acct` and `probe`."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

from fedhpc_dev.localsched.model import (
    DEFAULT_MEM_PER_CPU_MIB,
    END_STATES,
    Config,
    Job,
    Rejected,
    expand_path,
    parse_directives,
    parse_time,
)

__all__ = ["acct_row", "new_job", "probe_report", "queue_row"]


def _int(directives: dict[str, str], key: str, default: int) -> int:
    raw = directives.get(key)
    if raw is None:
        return default
    if not raw.isdigit():
        raise Rejected(f"invalid --{key} value {raw!r}")
    return int(raw)


def new_job(script: str, config: Config, *, job_id: int, user: str, cwd: str, now: datetime) -> Job:
    """The job a script asks for, or `Rejected` when the partition could never run it (as
    Slurm's EnforcePartLimits=ALL rejects at submit)."""
    d = parse_directives(script)
    name = d.get("job-name") or "script"
    part_name = d.get("partition") or next(iter(config.partitions), "")
    part = config.partitions.get(part_name)
    if part is None:
        raise Rejected(f"invalid partition specified: {part_name!r}")
    account = d.get("account") or (config.accounts[0] if config.accounts else None)
    if config.accounts and account not in config.accounts:
        raise Rejected(f"invalid account {account!r} (accounts: {', '.join(config.accounts)})")
    nodes = _int(d, "nodes", 1)
    cpus = _int(d, "cpus", 1)
    gpus = _int(d, "gpus", 0)
    mem = _int(d, "mem", 0) or min(part.memory_mib, cpus * DEFAULT_MEM_PER_CPU_MIB)
    limit = parse_time(d["time"]) if "time" in d else part.max_wall_s
    problems = [
        f"{what} {asked} > {cap}"
        for what, asked, cap in (
            ("nodes", nodes, part.nodes),
            ("cpus per node", cpus, part.cpus),
            ("GPUs per node", gpus, part.gpus),
            ("memory MiB per node", mem, part.memory_mib),
            ("time limit s", limit, part.max_wall_s),
        )
        if asked > cap
    ]
    if problems or min(nodes, cpus, limit) < 1:
        why = "; ".join(problems) or "nodes, cpus and time must be positive"
        raise Rejected(f"job violates partition {part.name} limits: {why}")
    workdir = d.get("chdir") or cwd
    out = expand_path(d.get("output") or "localsched-%j.out", job_id, name, user, workdir)
    err = expand_path(d["error"], job_id, name, user, workdir) if d.get("error") else out
    return Job(
        id=job_id,
        name=name,
        partition=part.name,
        user=user,
        account=account,
        nodes=nodes,
        cpus=cpus,
        memory_mib=mem,
        gpus=gpus,
        time_limit_s=limit,
        workdir=workdir,
        stdout=out,
        stderr=err,
        submit=now,
    )


def _iso(value: datetime | None) -> str | None:
    return value.isoformat(timespec="microseconds") if value else None


def queue_row(job: Job) -> dict[str, Any]:
    """What `queue` shows of a job that has not finished."""
    return {
        "id": job.id,
        "name": job.name,
        "state": job.state,
        "reason": job.reason,
        "partition": job.partition,
        "nodes": job.nodelist or None,
        "user": job.user,
    }


def acct_row(job: Job, config: Config | None) -> dict[str, Any]:
    """What `acct` shows of any job: times (eligible = submit: no dependencies here)."""
    part = config.partitions.get(job.partition) if config else None
    tres = {
        "cpu": str(job.cpus * job.nodes),
        "mem": f"{job.memory_mib * job.nodes}M",
        "node": str(job.nodes),
    }
    if job.gpus:
        tres["gres/gpu"] = str(job.gpus * job.nodes)
        if part is not None and part.gpu_type:
            tres[f"gres/gpu:{part.gpu_type}"] = str(job.gpus * job.nodes)
    elapsed = (job.end - job.start).total_seconds() if job.start and job.end else None
    return {
        **queue_row(job),
        "account": job.account,
        "submit": _iso(job.submit),
        "eligible": _iso(job.submit),
        "start": _iso(job.start),
        "end": _iso(job.end),
        "elapsed_s": None if elapsed is None else round(elapsed, 6),
        "exit_code": job.exit_code,
        "time_limit_s": job.time_limit_s,
        "gpu_indices": list(job.gpu_indices),
        "alloc_tres": tres if job.start else {},
        "stdout": job.stdout,
        "stderr": job.stderr,
    }


def probe_report(
    config: Config, jobs: list[Job], user: str | None, now: datetime
) -> dict[str, Any]:
    """Per partition: nodes by state, total and free CPUs, GPUs and memory, running and pending
    jobs (all and the user's); and the user's CPU-seconds per account."""
    parts = []
    for p in config.partitions.values():
        mine = [j for j in jobs if j.partition == p.name]
        used: dict[str, list[int]] = {n: [0, 0, 0] for n in p.node_names()}
        for j in mine:
            if j.state == "RUNNING":
                for node, cpus, mem, gpus in j.slots:
                    if node in used:
                        used[node][0] += cpus
                        used[node][1] += mem
                        used[node][2] += len(gpus)
        counts: Counter[str] = Counter()
        for c, _m, g in used.values():
            full = c >= p.cpus
            counts["idle" if c == 0 and g == 0 else "allocated" if full else "mixed"] += 1
        free_cpus = [p.cpus - u[0] for u in used.values()]
        free_gpus = [p.gpus - u[2] for u in used.values()]
        state = Counter((j.state, j.user == user) for j in mine)
        parts.append(
            {
                "name": p.name,
                "nodes": dict(counts),
                "node_names": p.node_names(),
                "gpu_type": p.gpu_type,
                "total_cpus": p.cpus * p.nodes,
                "free_cpus": sum(free_cpus),
                "max_free_cpus_on_node": max(free_cpus, default=0),
                "total_gpus": p.gpus * p.nodes,
                "free_gpus": sum(free_gpus),
                "max_free_gpus_on_node": max(free_gpus, default=0),
                "free_memory_mib": sum(p.memory_mib - u[1] for u in used.values()),
                "max_wall_s": p.max_wall_s,
                "running": state[("RUNNING", True)] + state[("RUNNING", False)],
                "pending": state[("PENDING", True)] + state[("PENDING", False)],
                "user_running": state[("RUNNING", True)],
                "user_pending": state[("PENDING", True)],
            }
        )
    usage: Counter[str] = Counter()
    for j in jobs:
        if j.user == user and j.account and j.start:
            end = j.end if j.state in END_STATES and j.end else now
            usage[j.account] += round(max(0.0, (end - j.start).total_seconds()) * j.cpus * j.nodes)
    return {"partitions": parts, "accounts": list(config.accounts), "usage_cpu_s": dict(usage)}
