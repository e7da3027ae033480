"""The scheduler's verbs. Each runs under the root's lock and starts with `tick`: reap jobs
whose wrapper died, then start whatever the plan lets start."""

from __future__ import annotations

import getpass
import os
import signal
from datetime import UTC, datetime
from typing import Any

from fedhpc_dev.localsched import procs
from fedhpc_dev.localsched.model import QUEUE_STATES, Config, Job, Rejected, plan_starts
from fedhpc_dev.localsched.store import SchedStore
from fedhpc_dev.localsched.views import acct_row, new_job, probe_report, queue_row

__all__ = ["acct", "cancel", "configure", "find", "probe", "queue", "submit", "tick", "utcnow"]


def utcnow() -> datetime:
    return datetime.now(UTC)


def tick(store: SchedStore, now: datetime) -> list[Job]:
    """Reap, then start queued jobs; returns every job as it now stands. Caller holds the lock."""
    jobs = store.load_all()
    for job in jobs:
        if job.state == "RUNNING" and not procs.alive(job.wrapper_pid, job.wrapper_ticks):
            # The wrapper records every normal end itself: a dead wrapper means it was killed.
            procs.signal_group(job.child_pgid, signal.SIGKILL)
            job.state, job.reason, job.end = "FAILED", "WrapperLost", now
            store.save(job)
    config = store.config()
    if config is None:
        return jobs
    before = {j.id: j.reason for j in jobs if j.state == "PENDING"}
    for job, _slots in plan_starts(config, jobs, now):
        job.state, job.start = "RUNNING", now
        argv = ["-m", "fedhpc_dev.localsched", "--root", str(store.root), "run-job", str(job.id)]
        job.wrapper_pid = procs.spawn_detached(argv, store.wrapper_log)
        job.wrapper_ticks = procs.start_ticks(job.wrapper_pid)
        store.save(job)  # the wrapper waits for our lock, then finds itself RUNNING
    for job in jobs:
        if job.state == "PENDING" and before.get(job.id, "") != job.reason:
            store.save(job)
    return jobs


def submit(store: SchedStore, script: str, *, env: dict[str, str], cwd: str) -> int:
    """Queue a script; returns its job id or raises Rejected."""
    with store.lock():
        config = store.config()
        if config is None:
            raise Rejected(
                f"no partitions configured under {store.root}: run `probe --config` or "
                "`configure` first (fedhpc's probe does it)"
            )
        now = utcnow()
        job_id = store.next_id()
        job = new_job(script, config, job_id=job_id, user=getpass.getuser(), cwd=cwd, now=now)
        store.save_inputs(job_id, script, env)
        store.save(job)
        tick(store, now)
        return job_id


def _select(jobs: list[Job], ids: list[int] | None) -> list[Job]:
    return jobs if ids is None else [j for j in jobs if j.id in set(ids)]


def queue(store: SchedStore, ids: list[int] | None = None) -> list[dict[str, Any]]:
    """Jobs that have not finished (pending or running)."""
    with store.lock():
        jobs = tick(store, utcnow())
    return [queue_row(j) for j in _select(jobs, ids) if j.state in QUEUE_STATES]


def acct(store: SchedStore, ids: list[int] | None = None) -> list[dict[str, Any]]:
    """Every job, finished or not, with its times and exit code."""
    with store.lock():
        jobs = tick(store, utcnow())
        config = store.config()
    return [acct_row(j, config) for j in _select(jobs, ids)]


def find(store: SchedStore, names: list[str]) -> list[dict[str, Any]]:
    """Jobs (any state) by name, oldest first."""
    with store.lock():
        jobs = tick(store, utcnow())
    return [{"id": j.id, "name": j.name} for j in jobs if j.name in set(names)]


def cancel(store: SchedStore, ids: list[int]) -> list[str]:
    """Cancel jobs; returns one error per unknown id. Finished jobs are left as they are."""
    errors = []
    with store.lock():
        now = utcnow()
        for job_id in ids:
            job = store.load(job_id)
            if job is None:
                errors.append(f"invalid job id {job_id}")
                continue
            if job.state not in QUEUE_STATES:
                continue
            was_running = job.state == "RUNNING"
            job.state, job.end, job.reason = "CANCELLED", now, None
            store.save(job)
            if was_running:
                # The wrapper stops the job's process group (TERM, then KILL after a grace).
                procs.signal_pid(job.wrapper_pid, signal.SIGTERM)
                procs.signal_group(job.child_pgid, signal.SIGTERM)
        tick(store, now)
    return errors


def configure(store: SchedStore, config: Config) -> bool:
    with store.lock():
        changed = store.write_config(config)
        tick(store, utcnow())
    return changed


def probe(store: SchedStore, user: str | None, config: Config | None = None) -> dict[str, Any]:
    """Per-partition capacity and queue counts; `config` (from the site profile) is stored
    first when given."""
    with store.lock():
        if config is not None:
            store.write_config(config)
        now = utcnow()
        jobs = tick(store, now)
        current = store.config()
    if current is None:
        raise Rejected(f"no partitions configured under {store.root}")
    return probe_report(current, jobs, user, now)


def job_env(store: SchedStore, job: Job) -> dict[str, str]:
    """The environment a job runs with: the submitter's, plus where and what it got."""
    env = store.load_env(job.id)
    env.update(
        {
            "LOCALSCHED_JOB_ID": str(job.id),
            "LOCALSCHED_JOB_NAME": job.name,
            "LOCALSCHED_PARTITION": job.partition,
            "LOCALSCHED_NODELIST": job.nodelist,
            "LOCALSCHED_CPUS_PER_NODE": str(job.cpus),
            "LOCALSCHED_SUBMIT_DIR": job.workdir,
        }
    )
    if job.gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in job.gpu_indices)
    else:
        env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def own_env() -> dict[str, str]:
    """What a submission records of the submitter's environment (Slurm's --export=ALL)."""
    return dict(os.environ)
