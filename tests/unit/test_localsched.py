"""fedhpc_dev.localsched with real processes: queueing, GPUs, cancel, time limits, accounting."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

CONFIG = {
    "partitions": [
        {
            "name": "ai",
            "nodes": 1,
            "cpus": 8,
            "memory_mib": 16384,
            "max_wall_s": 600,
            "gpus": 2,
            "gpu_type": "h100",
        },
        {
            "name": "gh",
            "nodes": 2,
            "cpus": 4,
            "memory_mib": 8192,
            "max_wall_s": 600,
            "gpus": 1,
            "gpu_type": "gh200",
        },
        {"name": "cpu", "nodes": 1, "cpus": 4, "memory_mib": 8192, "max_wall_s": 600},
    ],
    "accounts": ["fedhpc-cpu", "fedhpc-gpu"],
}


class Sched:
    """The scheduler's command line against one root folder."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "fedhpc_dev.localsched", "--root", str(self.root), *args]
        # Jobs without an output path write to the submit directory: the test's own folder.
        return subprocess.run(
            argv,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            cwd=self.root.parent,
        )

    def json(self, *args: str) -> Any:
        done = self.run(*args)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def submit(self, body: str, **directives: object) -> int:
        lines = ["#!/bin/bash"]
        lines += [f"#LOCALSCHED --{k.replace('_', '-')}={v}" for k, v in directives.items()]
        done = self.run("submit", stdin="\n".join([*lines, body]) + "\n")
        assert done.returncode == 0, done.stderr
        return int(done.stdout.strip())

    def job(self, job_id: int) -> dict[str, Any]:
        rows = self.json("acct", "--jobs", str(job_id))
        assert len(rows) == 1
        return dict(rows[0])

    def wait(self, job_id: int, states: set[str], timeout: float = 20) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            # Read the record directly: every CLI call would also start queued jobs, and the
            # wrappers must do that on their own.
            data = json.loads((self.root / "jobs" / f"{job_id}.json").read_text())
            if data["state"] in states:
                return self.job(job_id)
            assert time.monotonic() < deadline, f"job {job_id} stayed {data['state']}"
            time.sleep(0.1)


@pytest.fixture
def sched(tmp_path: Path) -> Sched:
    s = Sched(tmp_path / "sched")
    assert s.json("configure", json.dumps(CONFIG)) == {"changed": True}
    return s


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def test_job_runs_with_output_paths_exit_code_and_accounting_times(
    sched: Sched, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    job = sched.submit(
        "echo hello from $LOCALSCHED_JOB_ID in $PWD; echo oops >&2; exit 3",
        job_name="hello",
        partition="cpu",
        account="fedhpc-cpu",
        time=60,
        output=f"{out}/%x-%j.out",
        error=f"{out}/%j.err",
        chdir=str(tmp_path),
    )
    rec = sched.wait(job, {"FAILED"})
    assert (out / f"hello-{job}.out").read_text() == f"hello from {job} in {tmp_path}\n"
    assert (out / f"{job}.err").read_text() == "oops\n"
    assert rec["exit_code"] == 3
    assert rec["account"] == "fedhpc-cpu"
    assert rec["partition"] == "cpu"
    assert rec["nodes"] == "cpu-1"
    assert rec["alloc_tres"] == {"cpu": "1", "mem": "1024M", "node": "1"}
    submit, start, end = at(rec["submit"]), at(rec["start"]), at(rec["end"])
    assert submit.utcoffset() == timedelta(0)
    assert "." in rec["submit"]  # sub-second precision
    assert rec["eligible"] == rec["submit"]
    assert submit <= start < end
    assert rec["elapsed_s"] == pytest.approx((end - start).total_seconds(), abs=1e-5)
    assert sched.json("queue") == []  # finished jobs leave the queue, stay in acct


def test_default_output_goes_to_the_submit_directory_with_stderr_merged(
    sched: Sched, tmp_path: Path
) -> None:
    done = sched.run(
        "submit", stdin="#!/bin/bash\n#LOCALSCHED --partition=cpu\necho a; echo b >&2\n"
    )
    job = int(done.stdout)
    sched.wait(job, {"COMPLETED"})
    # The job ran where `submit` ran, and wrote there, like sbatch's default.
    assert sorted((tmp_path / f"localsched-{job}.out").read_text().split()) == ["a", "b"]
    assert sched.job(job)["stdout"] == f"{tmp_path}/localsched-{job}.out"


def test_full_partition_queues_fifo_and_assigns_distinct_gpus(sched: Sched, tmp_path: Path) -> None:
    # Each job holds its GPU until the test opens the gate (a fixed sleep could end before a
    # loaded machine had submitted the third job and read the queue).
    gate = tmp_path / "gate"
    hold = f"until [ -e {gate} ]; do sleep 0.1; done"
    body = f"echo $CUDA_VISIBLE_DEVICES > {tmp_path}/gpus-$LOCALSCHED_JOB_ID; {hold}"
    jobs = [sched.submit(body, partition="ai", gpus=1, time=60) for _ in range(3)]
    queue = {r["id"]: r for r in sched.json("queue")}
    assert [queue[j]["state"] for j in jobs] == ["RUNNING", "RUNNING", "PENDING"]
    assert queue[jobs[2]]["reason"] == "Resources"
    gate.touch()
    first = sched.wait(jobs[0], {"COMPLETED"})
    second = sched.wait(jobs[1], {"COMPLETED"})
    third = sched.wait(jobs[2], {"COMPLETED"})
    assert sorted([first["gpu_indices"], second["gpu_indices"]]) == [[0], [1]]
    seen = [(tmp_path / f"gpus-{j}").read_text().strip() for j in jobs]
    assert sorted(seen[:2]) == ["0", "1"]
    # The third started when a GPU came free, by the wrapper of the job that ended.
    freed = min(at(first["end"]), at(second["end"]))
    assert at(third["start"]) >= freed
    assert third["gpu_indices"] in ([0], [1])
    assert third["alloc_tres"]["gres/gpu:h100"] == "1"


def test_a_later_job_backfills_only_when_it_ends_before_the_blocked_one_could_start(
    sched: Sched,
) -> None:
    hold = sched.submit("sleep 30", partition="ai", gpus=2, cpus=1, time=30)
    big = sched.submit("true", partition="ai", gpus=1, cpus=8, time=60)
    short = sched.submit("sleep 30", partition="ai", cpus=2, time=10)
    long = sched.submit("sleep 30", partition="ai", cpus=2, time=120)
    queue = {r["id"]: (r["state"], r["reason"]) for r in sched.json("queue")}
    assert queue[hold] == ("RUNNING", None)
    assert queue[big] == ("PENDING", "Resources")
    assert queue[short] == ("RUNNING", None)  # ends (by its limit) before `hold` must end
    assert queue[long] == ("PENDING", "Priority")  # would delay `big`
    assert sched.run("cancel", str(hold), str(big), str(short), str(long)).returncode == 0


def test_multi_node_job_takes_one_slot_per_node(sched: Sched) -> None:
    job = sched.submit("sleep 30", partition="gh", nodes=2, gpus=1, time=60)
    rows = sched.json("queue")
    assert rows == [
        {
            "id": job,
            "name": "script",
            "nodes": "gh-1,gh-2",
            "partition": "gh",
            "reason": None,
            "state": "RUNNING",
            "user": rows[0]["user"],
        }
    ]
    probe = {p["name"]: p for p in sched.json("probe")["partitions"]}
    assert probe["gh"]["free_gpus"] == 0
    assert probe["gh"]["nodes"] == {"mixed": 2}
    sched.run("cancel", str(job))


def test_cancel_stops_running_and_pending_jobs_and_frees_their_gpus(
    sched: Sched, tmp_path: Path
) -> None:
    marker = tmp_path / "still-running"
    running = sched.submit(f"sleep 2; touch {marker}", partition="ai", gpus=2, time=60)
    pending = sched.submit("true", partition="ai", gpus=2, time=60)
    after = sched.submit("sleep 30", partition="ai", gpus=1, time=60)
    assert sched.run("cancel", str(running), str(pending)).returncode == 0
    assert sched.job(running)["state"] == "CANCELLED"
    assert sched.job(pending)["state"] == "CANCELLED"
    assert sched.job(pending)["start"] is None
    # The freed GPUs went to the next job at once.
    assert sched.job(after)["state"] == "RUNNING"
    # The wrapper records the exit code once the script's process group is gone (and
    # SIGKILLed): from then on nothing of it can touch the marker (no fixed sleep).
    deadline = time.monotonic() + 20
    while sched.job(running)["exit_code"] is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sched.job(running)["exit_code"] == 128 + signal.SIGTERM
    assert not marker.exists()
    assert sched.run("cancel", str(after)).returncode == 0
    bad = sched.run("cancel", "999")
    assert bad.returncode == 1
    assert "invalid job id 999" in bad.stderr


def test_time_limit_ends_a_job_as_timeout(sched: Sched, tmp_path: Path) -> None:
    marker = tmp_path / "ran-to-the-end"
    job = sched.submit(f"sleep 60; touch {marker}", partition="cpu", time=1)
    rec = sched.wait(job, {"TIMEOUT"}, timeout=60)
    # Ended by its limit (TIMEOUT, SIGTERMed, the script's end never reached), never before
    # it. How late a loaded machine kills it is not asserted: speed is for benchmarks/.
    assert rec["time_limit_s"] == 1
    assert rec["exit_code"] == 128 + signal.SIGTERM
    assert not marker.exists()
    assert at(rec["end"]) - at(rec["start"]) >= timedelta(seconds=1)


def test_a_job_whose_wrapper_is_killed_is_reaped_as_failed(sched: Sched, tmp_path: Path) -> None:
    job = sched.submit("sleep 60", partition="cpu", time=60)
    record = json.loads((sched.root / "jobs" / f"{job}.json").read_text())
    deadline = time.monotonic() + 10
    while record.get("child_pgid") is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
        record = json.loads((sched.root / "jobs" / f"{job}.json").read_text())
    os.kill(record["wrapper_pid"], signal.SIGKILL)
    time.sleep(0.3)
    rec = sched.job(job)  # any invocation reaps
    assert rec["state"] == "FAILED"
    assert rec["reason"] == "WrapperLost"
    time.sleep(0.2)
    assert live_in_group(record["child_pgid"]) == []  # and the job's processes are gone


def live_in_group(pgid: int) -> list[int]:
    """Processes of a process group that are not zombies (a reaped group has none)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in {"Z", "X"}:
            out.append(int(stat.parent.name))
    return out


def test_find_returns_jobs_by_name_in_any_state(sched: Sched) -> None:
    a = sched.submit("true", job_name="fedhpc-t1-1", partition="cpu")
    sched.wait(a, {"COMPLETED"})
    b = sched.submit("sleep 30", job_name="fedhpc-t2-1", partition="cpu")
    found = sched.json("find", "fedhpc-t1-1", "fedhpc-t2-1", "fedhpc-none")
    assert found == [{"id": a, "name": "fedhpc-t1-1"}, {"id": b, "name": "fedhpc-t2-1"}]
    sched.run("cancel", str(b))


def test_probe_reports_capacity_queues_and_usage(sched: Sched) -> None:
    running = sched.submit("sleep 30", partition="ai", gpus=2, cpus=3, account="fedhpc-gpu")
    pending = sched.submit("sleep 30", partition="ai", gpus=1)
    me = sched.job(running)["user"]
    time.sleep(0.2)
    report = sched.json("probe", f"--user={me}")
    ai = next(p for p in report["partitions"] if p["name"] == "ai")
    assert ai["total_gpus"] == 2 and ai["free_gpus"] == 0 and ai["max_free_gpus_on_node"] == 0
    assert ai["total_cpus"] == 8 and ai["free_cpus"] == 5 and ai["max_free_cpus_on_node"] == 5
    assert ai["free_memory_mib"] == 16384 - 3 * 1024
    assert (ai["running"], ai["pending"], ai["user_running"], ai["user_pending"]) == (1, 1, 1, 1)
    assert ai["nodes"] == {"mixed": 1}
    other = sched.json("probe", "--user=someone-else")
    assert next(p for p in other["partitions"] if p["name"] == "ai")["user_running"] == 0
    cpu = next(p for p in report["partitions"] if p["name"] == "cpu")
    assert cpu["nodes"] == {"idle": 1} and cpu["total_gpus"] == 0
    assert report["accounts"] == ["fedhpc-cpu", "fedhpc-gpu"]
    assert report["usage_cpu_s"]["fedhpc-gpu"] >= 0
    sched.run("cancel", str(running), str(pending))


def test_probe_with_a_config_stores_it_first(tmp_path: Path) -> None:
    s = Sched(tmp_path / "fresh")
    assert s.run("submit", stdin="#!/bin/bash\ntrue\n").returncode == 1
    report = s.json("probe", f"--config={json.dumps(CONFIG)}")
    assert [p["name"] for p in report["partitions"]] == ["ai", "gh", "cpu"]
    assert s.submit("true", partition="cpu") == 1


@pytest.mark.parametrize(
    ("directives", "message"),
    [
        ({"partition": "nope"}, "invalid partition"),
        ({"partition": "cpu", "account": "other"}, "invalid account"),
        ({"partition": "ai", "gpus": 3}, "GPUs per node 3 > 2"),
        ({"partition": "cpu", "time": 601}, "time limit s 601 > 600"),
        ({"partition": "gh", "nodes": 3}, "nodes 3 > 2"),
        ({"partition": "cpu", "mem": 9000}, "memory MiB per node 9000 > 8192"),
    ],
)
def test_jobs_a_partition_can_never_run_are_rejected_at_submit(
    sched: Sched, directives: dict[str, object], message: str
) -> None:
    lines = ["#!/bin/bash", *(f"#LOCALSCHED --{k}={v}" for k, v in directives.items()), "true"]
    done = sched.run("submit", stdin="\n".join(lines) + "\n")
    assert done.returncode == 1
    assert message in done.stderr
    assert sched.json("acct") == []


def test_job_ids_are_numeric_and_increasing(sched: Sched) -> None:
    ids = [sched.submit("true", partition="cpu") for _ in range(3)]
    assert ids == sorted(ids) and len(set(ids)) == 3 and ids[0] >= 1
