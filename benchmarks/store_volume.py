"""The store and the REST API at volume: 100,000 events and a 5,000-task group in a real
`fedhpc daemon`'s store (no site configured: nothing is contacted), then the calls people and
agents make, each timed over the daemon's Unix socket:

  list_events pages (GET /v1/events?after=&limit=100) at the start, middle and end of the log,
  reading the whole log in pages of 1,000, task listings (GET /v1/tasks, with and without a
  state), the group view (first and a middle page), and get_result;

then `archive-events` (POST /v1/events/archive) for events older than 30 days, with the
store's size and pages in use before and after. Prints p50/p99 per call (target p99 <= 100 ms).

Run: .venv/bin/python benchmarks/store_volume.py [--events 100000] [--tasks 5000] [--reps 100]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.domain import JobState
from fedhpc.domain.job import Shape
from fedhpc.ops.tasks import ResultRequest, SubmitTaskRequest
from fedhpc.orchestrator.records import AttemptRecord, TaskRecord
from fedhpc.settings.daemon import DaemonSettings
from fedhpc.store import Store

NOW = datetime.now(UTC)
TARGET_P99_MS = 100.0


async def build(db: Path, n_events: int, n_tasks: int) -> str:
    """A store with one completed group of `n_tasks` (one attempt each) and `n_events` events
    spread over the last 60 days, all routed by the bridge. Returns the group id."""
    store = await Store.open(db)
    gid = "g" + "0" * 12
    width = len(str(n_tasks - 1))
    start = NOW - timedelta(days=60)
    try:
        async with store.transaction() as tx:
            await tx.put_group(
                gid,
                state="completed",
                round_=1,
                at=start,
                body={"objective": "volume", "spread": True},
            )
            for i in range(n_tasks):
                tid = f"t{'0' * 12}-{i:0{width}d}"
                req = SubmitTaskRequest(
                    command=("python", "train.py", f"--seed={i}"),
                    envelope={"cpus": {"min": 1, "max": 2}},
                )
                task = TaskRecord(
                    id=tid,
                    request=req,
                    idempotency_key=f"{gid}:{i}",
                    state=JobState.COMPLETED,
                    created_at=start,
                    group_id=gid,
                    decision="devdelta/cpu (best-feasible): est. wait 3s",
                    accepted_attempt=1,
                    attempts_made=1,
                )
                await tx.put_task(
                    tid,
                    state="completed",
                    body=task.model_dump(mode="json"),
                    at=start,
                    idempotency_key=task.idempotency_key,
                    group_id=gid,
                )
                att = AttemptRecord(
                    task_id=tid,
                    n=1,
                    site="devdelta",
                    partition="cpu",
                    account="fedhpc-cpu",
                    qos=None,
                    shape=Shape(cpus=2),
                    job_name=f"fedhpc-{tid}-1",
                    job_id=str(1000 + i),
                    state=JobState.COMPLETED,
                    created_at=start,
                    exit_code=0,
                    stdout=f"/scratch/fedhpc/{tid}/1.out",
                    stderr=f"/scratch/fedhpc/{tid}/1.err",
                )
                await tx.put_attempt(
                    tid,
                    1,
                    site=att.site,
                    partition=att.partition,
                    job_name=att.job_name,
                    job_id=att.job_id,
                    state="completed",
                    body=att.model_dump(mode="json"),
                    at=start,
                )
        step = timedelta(days=60) / max(1, n_events)
        for lo in range(0, n_events, 10_000):
            async with store.transaction() as tx:
                for i in range(lo, min(n_events, lo + 10_000)):
                    tid = f"t{i:012d}"
                    await tx.append_event(
                        "task.terminal",
                        tid,
                        {
                            "task_id": tid,
                            "state": "completed",
                            "site": "devdelta",
                            "attempt": 1,
                            "job_id": str(i),
                            "result": f"fedhpc://tasks/{tid}",
                        },
                        at=start + step * i,
                        key=f"vol:{i}",
                    )
        async with store.transaction() as tx:
            await tx.set_cursor("bridge", n_events, at=NOW)
    finally:
        await store.close()
    return gid


def _sizes(db: Path) -> dict[str, int]:
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        events = conn.execute("SELECT count(*) FROM events").fetchone()[0]
    on_disk = sum(p.stat().st_size for p in db.parent.glob(db.name + "*"))
    return {"events": events, "file_bytes": on_disk, "in_use_bytes": (pages - free) * size}


async def _time(reps: int, call: Callable[[], Awaitable[Any]]) -> dict[str, float]:
    ms = []
    for _ in range(reps):
        t0 = time.perf_counter()
        await call()
        ms.append((time.perf_counter() - t0) * 1000)
    q = statistics.quantiles(ms, n=100)
    return {"p50_ms": round(q[49], 1), "p99_ms": round(q[98], 1)}


def _daemon(home: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with (home / "daemon.log").open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "fedhpc.cli.main", "daemon"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="fedhpc-volume-bench-"))
    settings = DaemonSettings.from_env(home=home)
    t0 = time.monotonic()
    gid = await build(settings.db_path, args.events, args.tasks)
    out: dict[str, Any] = {"build_s": round(time.monotonic() - t0, 1), "calls": {}}
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEDHPC_")}
    env |= {"FEDHPC_HOME": str(home), "FEDHPC_EVENTS_KEEP_DAYS": "0", "FEDHPC_LOG_LEVEL": "warning"}
    daemon = _daemon(home, env)
    try:
        async with DaemonClient(settings) as c:
            await c.wait_until_up(30)
            mid, last = args.events // 2, args.events - 100
            width = len(str(args.tasks - 1))
            one = f"t{'0' * 12}-{args.tasks // 2:0{width}d}"
            calls: dict[str, Callable[[], Awaitable[Any]]] = {
                "GET /v1/events?after=0&limit=100": lambda: c.events(after=0, limit=100),
                f"GET /v1/events?after={mid}&limit=100": lambda: c.events(after=mid, limit=100),
                f"GET /v1/events?after={last}&limit=100": lambda: c.events(after=last, limit=100),
                "GET /v1/tasks?limit=100": lambda: c.tasks(limit=100),
                "GET /v1/tasks?state=completed&limit=100": lambda: c.tasks("completed", 100),
                "GET /v1/groups/{id} (first page of 200)": lambda: c.group(gid),
                "GET /v1/groups/{id}?after=<middle child>": lambda: c.group(gid, after=one),
                "GET /v1/tasks/{id} (get_result)": lambda: c.get_result(
                    ResultRequest(task_id=one, preview="none")
                ),
            }
            for name, call in calls.items():
                out["calls"][name] = await _time(args.reps, call)
            t0 = time.monotonic()
            after, pages = 0, 0
            while rows := await c.events(after=after, limit=1000):
                after, pages = int(rows[-1]["seq"]), pages + 1
            out["read_whole_log"] = {"pages": pages, "s": round(time.monotonic() - t0, 2)}
            out["store_before"] = _sizes(settings.db_path)
            t0 = time.monotonic()
            out["archive"] = await c.archive_events(30)
            out["archive"]["s"] = round(time.monotonic() - t0, 2)
            out["store_after"] = _sizes(settings.db_path)
            out["calls_after_archive"] = {
                "GET /v1/events?after=0&limit=100": await _time(
                    args.reps, calls["GET /v1/events?after=0&limit=100"]
                ),
            }
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
        shutil.rmtree(home, ignore_errors=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--reps", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out = anyio.run(_run, args)
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(
        f"store: {args.events} events, {args.tasks} tasks in one group "
        f"(built in {out['build_s']} s)"
    )
    for name, q in out["calls"].items():
        mark = "pass" if q["p99_ms"] <= TARGET_P99_MS else "FAIL"
        print(f"  {name:<44} p50 {q['p50_ms']:>6} ms  p99 {q['p99_ms']:>6} ms  {mark}")
    w = out["read_whole_log"]
    print(f"  whole log in pages of 1,000: {w['pages']} pages in {w['s']} s")
    b, a, ar = out["store_before"], out["store_after"], out["archive"]
    print(f"archive-events --older-than-days 30: {ar['archived']} events moved in {ar['s']} s")
    print(
        f"  store before: {b['events']} events, {b['file_bytes'] / 1e6:.1f} MB on disk, "
        f"{b['in_use_bytes'] / 1e6:.1f} MB in use"
    )
    print(
        f"  store after:  {a['events']} events, {a['file_bytes'] / 1e6:.1f} MB on disk, "
        f"{a['in_use_bytes'] / 1e6:.1f} MB in use (freed pages are reused)"
    )
    q = out["calls_after_archive"]["GET /v1/events?after=0&limit=100"]
    print(
        f"  GET /v1/events?after=0&limit=100 after archiving: p50 {q['p50_ms']} ms, "
        f"p99 {q['p99_ms']} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
