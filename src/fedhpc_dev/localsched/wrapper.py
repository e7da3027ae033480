"""A job's wrapper (`run-job ID`): runs the script in its own process group, enforces the time
limit, records the end and exit code, then lets queued jobs start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from types import FrameType
from typing import IO

from fedhpc_dev.localsched import procs
from fedhpc_dev.localsched.sched import job_env, tick, utcnow
from fedhpc_dev.localsched.store import SchedStore

__all__ = ["KILL_WAIT_S", "run_job"]

KILL_WAIT_S = 5.0  # SIGTERM, then SIGKILL this much later (Slurm's KillWait in the federation)


def _log(text: str) -> None:
    print(f"localsched wrapper {os.getpid()}: {text}", file=sys.stderr, flush=True)


def _open_outputs(stack: ExitStack, stdout: str, stderr: str) -> tuple[IO[bytes], IO[bytes]]:
    out = stack.enter_context(open(stdout, "ab"))  # noqa: SIM115 (closed by the stack)
    if stderr == stdout:
        return out, out
    return out, stack.enter_context(open(stderr, "ab"))


def run_job(store: SchedStore, job_id: int) -> int:
    stop_at: list[float] = []  # when the job was told to stop (time limit or cancel)

    def stop(signum: int = 0, frame: FrameType | None = None) -> None:
        if not stop_at:
            stop_at.append(time.monotonic())
            procs.signal_group(child_pgid, signal.SIGTERM)

    child_pgid: int | None = None
    signal.signal(signal.SIGTERM, stop)
    with ExitStack() as stack:
        with store.lock():
            job = store.load(job_id)
            if job is None or job.state != "RUNNING" or job.wrapper_pid != os.getpid():
                return 0  # not ours to run (cancelled, or a stale launch)
            try:
                out, err = _open_outputs(stack, job.stdout, job.stderr)
                child = subprocess.Popen(
                    ["bash", str(store.script_path(job_id))],
                    cwd=job.workdir,
                    env=job_env(store, job),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    process_group=0,
                )
            except OSError as exc:
                _log(f"job {job_id} could not start: {exc}")
                job.state, job.reason, job.exit_code = "FAILED", "LaunchFailed", 1
                job.end = utcnow()
                store.save(job)
                tick(store, utcnow())
                return 1
            child_pgid = job.child_pgid = child.pid
            store.save(job)
            assert job.start is not None
            remaining = job.time_limit_s - (utcnow() - job.start).total_seconds()
        deadline = time.monotonic() + remaining
        timed_out = False
        while True:
            try:
                rc = child.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                pass
            if not stop_at and time.monotonic() >= deadline:
                timed_out = True
                stop()
            if stop_at and time.monotonic() - stop_at[0] >= KILL_WAIT_S:
                procs.signal_group(child_pgid, signal.SIGKILL)
        procs.signal_group(child_pgid, signal.SIGKILL)  # what the script left behind
    end = utcnow()
    with store.lock():
        job = store.load(job_id)
        if job is not None and job.state == "CANCELLED" and job.exit_code is None:
            job.exit_code = rc if rc >= 0 else 128 - rc
            store.save(job)
        elif job is not None and job.state == "RUNNING":
            job.exit_code = rc if rc >= 0 else 128 - rc
            job.state = "TIMEOUT" if timed_out else ("COMPLETED" if rc == 0 else "FAILED")
            job.end = end
            store.save(job)
        tick(store, end)
    return 0
