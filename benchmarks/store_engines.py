"""The store on PostgreSQL next to SQLite (issue 35): the same store operations and the same daemon
submits on both engines, on this machine.

Store level (`--ops N`): per engine, the median of N runs of the daemon's hot writes and
reads: one task's submit transaction (task row, attempt intent, event), a 1,000-child group's
acceptance (group row, 1,000 task rows in one statement, event), a group's summary and a
200-child page at 5,000 children, 100 events after a cursor, the wait estimators' 2,000
completed attempts.

Daemon level (`--submits N`, `--group G`): per engine, a real `fedhpc daemon` on four private
process sites (no Slurm), N single `true` tasks submitted one after another over REST (median
and p95 answer), then one G-child group (its answer), then the time until every task and child
has completed (the sweep's throughput).

PostgreSQL is a private server (fedhpc_dev/postgres.py) with synchronous_commit=off, the
durability of the SQLite store's WAL with synchronous=NORMAL (a process crash loses no commit,
a power loss may lose the last ones).

Run: .venv/bin/python benchmarks/store_engines.py [--ops 30] [--submits 100] [--group 1000]
     [--socket] [--json]     (--socket: over the server's Unix socket rather than loopback TCP)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.domain.job import TERMINAL, JobState
from fedhpc.ops.tasks import SubmitGroupRequest, SubmitTaskRequest
from fedhpc.settings.daemon import DaemonSettings
from fedhpc.store import Store
from fedhpc_dev.postgres import PgServer
from fedhpc_dev.postgres import start as start_postgres

T0 = datetime(2026, 12, 1, tzinfo=UTC)
ENVELOPE = {"cpus": {"min": 1, "max": 1}, "wall_time": {"min": "5m", "max": "5m"}}
LIVE = [s for s in JobState if s not in TERMINAL]
GOAL = 1.5  # issue 35: PostgreSQL within 1.5x of SQLite


async def _median_ms(n: int, op: Callable[[int], Awaitable[object]]) -> float:
    took = []
    for i in range(n):
        t = time.perf_counter()
        await op(i)
        took.append((time.perf_counter() - t) * 1000)
    return round(statistics.median(took), 2)


async def _store_ops(store: Store, n: int) -> dict[str, float]:
    body = {"request": {"command": ["true"], "name": "x" * 40}, "decision": "", "trace": [1] * 50}

    async def submit(i: int) -> None:
        async with store.transaction() as tx:
            await tx.put_task(f"s{i}", state="queued", body=body, at=T0, idempotency_key=f"k{i}")
            await tx.put_attempt(
                f"s{i}", 1, site="a", partition="p", job_name=f"j{i}", job_id=None,
                state="pending", body={"shape": {"cpus": 1}}, at=T0,
            )  # fmt: skip
            await tx.append_event("task.accepted", f"s{i}", {"task_id": f"s{i}"}, at=T0)

    async def group(i: int, size: int = 1000) -> None:
        gid = f"g{i}"
        async with store.transaction() as tx:
            await tx.put_group(gid, state="placing", round_=0, body={"objective": "b"}, at=T0)
            rows = ((f"{gid}-{k}", f"{gid}:{k}", gid, "queued", body) for k in range(size))
            await tx.insert_tasks(rows, at=T0)
            await tx.append_event("group.accepted", gid, {"group_id": gid}, at=T0)

    out = {"submit_tx_ms": await _median_ms(n, submit)}
    out["group_1000_accept_ms"] = await _median_ms(max(3, n // 10), group)
    await group(10_000, 5000)  # g10000: 5,000 children, 2,000 of them completed
    async with store.transaction() as tx:
        for k in range(2000):
            await tx.put_attempt(
                f"g10000-{k}", 1, site="ab"[k % 2], partition="p", job_name=f"j{k}",
                job_id=str(k), state="completed",
                body={"wait_s": k % 60, "shape": {"gpus": 0, "cpus": 1}}, at=T0,
            )  # fmt: skip
    out["group_summary_5000_ms"] = await _median_ms(n, lambda _: store.group_summary("g10000"))
    out["group_page_200_ms"] = await _median_ms(
        n, lambda _: store.group_children("g10000", after="g10000-1", limit=200)
    )
    out["events_after_100_ms"] = await _median_ms(n, lambda _: store.events_after(0, limit=100))
    out["wait_samples_2000_ms"] = await _median_ms(max(3, n // 5), lambda _: store.wait_samples())
    return out


async def _store_level(server: PgServer, n: int, socket: bool) -> dict[str, dict[str, float]]:
    folder = Path(tempfile.mkdtemp(prefix="fedhpc-engines-"))
    try:
        lite = await Store.open(folder / "fedhpc.db")
        pg = await Store.open_url(server.create_database(socket=socket))
        try:
            return {"sqlite": await _store_ops(lite, n), "postgresql": await _store_ops(pg, n)}
        finally:
            await lite.close()
            await pg.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


async def _daemon_level(url: str | None, submits: int, group: int) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="fedhpc-engines-daemon-"))
    env = {
        **os.environ,
        "FEDHPC_HOME": str(home),
        "FEDHPC_DEVFED": "process",
        "FEDHPC_DEVFED_DIR": str(home / "fed"),
        "FEDHPC_CYCLE_S": "1",
        "FEDHPC_REFRESH_S": "2",
        "FEDHPC_LOG_LEVEL": "warning",
    }
    env.pop("FEDHPC_STORE_URL", None)
    if url:
        env["FEDHPC_STORE_URL"] = url
    with (home / "daemon.log").open("wb") as log:
        daemon = subprocess.Popen(  # noqa: ASYNC220 (started once, lives for the run)
            [sys.executable, "-m", "fedhpc.cli.main", "daemon"],
            env=env, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True,
        )  # fmt: skip
    settings = DaemonSettings.from_env(home=home)
    try:
        async with DaemonClient(settings) as client:
            await client.wait_until_up(60)
            await client.refresh()
            took = []
            for i in range(submits):
                req = SubmitTaskRequest(command=("true",), envelope=ENVELOPE, name=f"b{i}")
                t = time.perf_counter()
                await client.submit_task(req)
                took.append(time.perf_counter() - t)
            children = [{"command": ["true"], "name": f"c{i}"} for i in range(group)]
            req_g = SubmitGroupRequest.model_validate(
                {"objective": "engines", "children": children, "envelope": ENVELOPE}
            )
            t = time.perf_counter()
            await client.submit_group(req_g)
            group_s = time.perf_counter() - t
            started = time.monotonic()
            with anyio.fail_after(1800):
                while True:  # until no task is left in a live state
                    live = [len(await client.tasks(state=s.value, limit=10)) for s in LIVE]
                    if not any(live):
                        break
                    await anyio.sleep(1)
            failed = len(await client.tasks(state="failed", limit=1000))
            took.sort()
            health = await client.health()
            route = health.get("requests", {}).get("by_route", {}).get("POST /v1/tasks", {})
            return {
                "daemon_submit_p50_ms": route.get("p50_ms"),
                "submit_median_ms": round(statistics.median(took) * 1000, 1),
                "submit_p95_ms": round(took[int(0.95 * (len(took) - 1))] * 1000, 1),
                f"group_{group}_answer_s": round(group_s, 3),
                "all_completed_s": round(time.monotonic() - started, 1),
                "failed": failed,
            }
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
        if os.environ.get("KEEP_LOG"):
            print((home / "daemon.log").read_text()[-3000:], file=sys.stderr)
        shutil.rmtree(home, ignore_errors=True)


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    server = start_postgres(durable=True)
    try:
        out: dict[str, Any] = {"store": await _store_level(server, args.ops, args.socket)}
        if args.submits:
            out["daemon"] = {
                "sqlite": await _daemon_level(None, args.submits, args.group),
                "postgresql": await _daemon_level(
                    server.create_database(socket=args.socket), args.submits, args.group
                ),
            }
        return out
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=30, help="runs per store operation")
    parser.add_argument("--submits", type=int, default=100, help="daemon submits (0: none)")
    parser.add_argument("--group", type=int, default=1000, help="children of the daemon's group")
    parser.add_argument("--socket", action="store_true", help="PostgreSQL over its Unix socket")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out = anyio.run(_run, args)
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    for level, rows in out.items():
        print(f"{level}:")
        lite, pg = rows["sqlite"], rows["postgresql"]
        for key in lite:
            if not key.endswith(("_ms", "_s")):  # a count (failed tasks): side by side
                print(f"  {key:26s} sqlite {lite[key]:>9} postgresql {pg[key]:>9}")
                continue
            ratio = pg[key] / lite[key] if lite[key] else float("nan")
            mark = "" if ratio <= GOAL else f"  (over {GOAL}x)"
            print(f"  {key:26s} sqlite {lite[key]:>9} postgresql {pg[key]:>9}  {ratio:.2f}x{mark}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
