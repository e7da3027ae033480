"""Submit latency at scale: how long `submit_group` takes to answer for 100, 1,000 and 5,000
children, through the real MCP client (stdio, legacy mode, as Claude Code and Codex connect)
against a real `fedhpc daemon` on the local Slurm federation; and the daemon's peak RSS.

Per group size it prints: the tool call's wall time (client side, from sending tools/call to
the answer), the answer's size in bytes, and how many children the daemon had handed to a
scheduler when the answer arrived and after `--settle` seconds (placement continues in the
daemon). At the end: the daemon's peak RSS (VmHWM, MB of 10^6 bytes) over the whole run,
which includes placing and dispatching the children.

Every child is `true` on 1 CPU. The groups' jobs are cancelled at the end (by job id, from the
daemon's store), unless --complete waits for every child to finish first.

Run: .venv/bin/python benchmarks/submit_latency.py [--sizes 100,1000,5000] [--settle 10]
     [--complete] [--json]

Many sessions (issue 33): `--sessions 1,8,16,32 [--per-session 10] [--sites process|slurm]` starts,
per count, a fresh daemon and that many `fedhpc serve` processes (each its own MCP session over
stdio), then every session submits `--per-session` single tasks (`sleep 1`, 1 CPU) one after
another, all sessions at once. Per count it prints the answer's median and p99 on the client,
the daemon's own median for POST /v1/tasks (its request timings), how many answers said
`queued` (the placement wait ran out), and the throughput (submits answered per second).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp_types import CallToolResult, TextContent

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.settings.daemon import DaemonSettings
from fedhpc_dev.profiles import devfed_root

ENVELOPE = {"cpus": {"min": 1, "max": 1}, "wall_time": {"min": "5m", "max": "5m"}}
TARGET_S = 2.0  # issue 21: a 1,000-child group's id within 2 s


def _text(result: CallToolResult) -> str:
    """A tool result's text blocks, joined."""
    return "".join(c.text for c in result.content if isinstance(c, TextContent))


def _fedhpc() -> str:
    return shutil.which("fedhpc", path=str(Path(sys.executable).parent)) or "fedhpc"


def _vm_hwm_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024 / 1e6
    return float("nan")


def _dispatched(db: Path, group_id: str) -> int:
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        row = conn.execute(
            "SELECT count(DISTINCT a.task_id) FROM attempts a JOIN tasks t ON a.task_id = t.id "
            "WHERE t.group_id = ? AND a.job_id IS NOT NULL",
            (group_id,),
        ).fetchone()
    return int(row[0])


def _cancel(db: Path, groups: list[str] | None = None) -> int:
    """scancel our jobs (those of `groups`, or every job of this run's daemon), by id, per
    site: never anyone else's."""
    query = "SELECT a.site, a.job_id FROM attempts a JOIN tasks t ON a.task_id = t.id "
    query += "WHERE a.job_id IS NOT NULL"
    if groups is not None:
        query += f" AND t.group_id IN ({','.join('?' * len(groups))})"
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        rows = conn.execute(query, groups or ()).fetchall()
    by_site: dict[str, list[str]] = {}
    for site, job in rows:
        by_site.setdefault(site, []).append(job)
    for site, jobs in by_site.items():
        env = {**os.environ, "SLURM_CONF": str(devfed_root() / site / "slurm.conf")}
        for i in range(0, len(jobs), 500):
            subprocess.run(
                ["scancel", *jobs[i : i + 500]], env=env, check=False, capture_output=True
            )
    return len(rows)


def _start(
    home: Path, cycle: float, devfed: str = "1", **extra: str
) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    env = {
        **os.environ,
        **extra,
        "FEDHPC_HOME": str(home),
        "FEDHPC_DEVFED": devfed,
        "FEDHPC_CYCLE_S": str(cycle),
        "FEDHPC_REFRESH_S": str(cycle),
        "FEDHPC_LOG_LEVEL": "warning",
    }
    with (home / "daemon.log").open("wb") as log:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "fedhpc.cli.main", "daemon"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
            # A session of its own, as `fedhpc serve` starts it (client/start.py): with the
            # kernel's autogroups the CPUs are shared by session, and in the benchmark's the
            # daemon would share one share with the benchmark and its MCP server.
            start_new_session=True,
        )
    return daemon, env


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="fedhpc-submit-bench-"))
    daemon, env = _start(home, args.cycle)
    settings = DaemonSettings.from_env(home=home)
    rows: list[dict[str, Any]] = []
    groups: list[str] = []
    try:
        async with DaemonClient(settings) as client:
            await client.wait_until_up(30)
            await client.refresh()
            params = StdioServerParameters(
                command=_fedhpc(), args=["serve", "--no-autostart"], env=env
            )
            async with Client(params, mode="legacy") as mcp:
                await mcp.list_tools()
                for n in args.sizes:
                    children = [{"command": ["true"], "name": f"c{i}"} for i in range(n)]
                    started = time.monotonic()
                    result = await mcp.call_tool(
                        "submit_group",
                        {
                            "objective": f"benchmark: {n} children",
                            "children": children,
                            "envelope": ENVELOPE,
                        },
                    )
                    elapsed = time.monotonic() - started
                    text = _text(result)
                    if result.is_error:
                        rows.append({"children": n, "error": text})
                        continue
                    gid = json.loads(text)["group_id"]
                    groups.append(gid)
                    at_answer = _dispatched(settings.db_path, gid)
                    await anyio.sleep(args.settle)
                    rows.append(
                        {
                            "children": n,
                            "submit_s": round(elapsed, 3),
                            "answer_bytes": len(text.encode()),
                            "dispatched_at_answer": at_answer,
                            f"dispatched_after_{args.settle:g}s": _dispatched(
                                settings.db_path, gid
                            ),
                        }
                    )
            if args.complete:
                with anyio.fail_after(3600):
                    for gid in groups:
                        while (await client.group(gid)).state in ("placing", "running"):  # noqa: ASYNC110
                            await anyio.sleep(2)
        peak = _vm_hwm_mb(daemon.pid)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
    cancelled = _cancel(settings.db_path, groups) if groups else 0
    shutil.rmtree(home, ignore_errors=True)
    return {"rows": rows, "daemon_peak_rss_mb": round(peak, 1), "jobs_cancelled": cancelled}


@dataclass
class Session:
    """One agent session's signals to the benchmark, and its answers: (seconds, state, task id)."""

    tag: str
    connected: anyio.Event = field(default_factory=anyio.Event)
    done: anyio.Event = field(default_factory=anyio.Event)
    answers: list[tuple[float, str, str | None]] = field(default_factory=list)


async def _session(params: StdioServerParameters, n: int, s: Session, ready: anyio.Event) -> None:
    """One agent session: its own `fedhpc serve`, `n` submits one after another once `ready`."""
    async with Client(params, mode="legacy") as mcp:
        await mcp.list_tools()
        s.connected.set()
        await ready.wait()
        for i in range(n):
            args = {
                "command": ["sleep", "1"],
                "name": f"{s.tag}-{i}",
                "envelope": {"cpus": {"min": 1}, "wall_time": {"min": "5m"}},
                "idempotency_key": f"{s.tag}-{i}",
            }
            started = time.monotonic()
            result = await mcp.call_tool("submit_task", args)
            took = time.monotonic() - started
            text = _text(result)
            body = json.loads(text) if text.startswith("{") else {}
            s.answers.append((took, body.get("state", "error"), body.get("task_id")))
        s.done.set()


def _quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


async def _sessions(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for count in args.sessions:
        home = Path(tempfile.mkdtemp(prefix="fedhpc-sessions-bench-"))
        if args.sites == "process":  # four private sites in the run's own folder
            daemon, env = _start(home, args.cycle, "process", FEDHPC_DEVFED_DIR=str(home / "fed"))
        else:
            daemon, env = _start(home, args.cycle)
        settings = DaemonSettings.from_env(home=home)
        try:
            async with DaemonClient(settings) as client:
                await client.wait_until_up(60)
                await client.refresh()
                params = StdioServerParameters(
                    command=_fedhpc(), args=["serve", "--no-autostart"], env=env
                )
                ready = anyio.Event()
                sessions = [Session(f"s{k}") for k in range(count)]
                async with anyio.create_task_group() as tg:
                    for s in sessions:
                        tg.start_soon(_session, params, args.per_session, s, ready)
                    with anyio.fail_after(120):
                        for s in sessions:
                            await s.connected.wait()
                    started = time.monotonic()
                    ready.set()
                    with anyio.fail_after(600):
                        for s in sessions:
                            await s.done.wait()
                    wall = time.monotonic() - started
                answers = [a for s in sessions for a in s.answers]
                took = [a[0] for a in answers]
                health = await client.health()
                route = health.get("requests", {}).get("by_route", {}).get("POST /v1/tasks", {})
                tasks = [a[2] for a in answers if a[2]]
                rows.append(
                    {
                        "sessions": count,
                        "submits": len(answers),
                        "answer_median_s": round(statistics.median(took), 3),
                        "answer_p99_s": round(_quantile(took, 0.99), 3),
                        "daemon_median_ms": route.get("p50_ms"),
                        "answered_queued": sum(1 for a in answers if a[1] == "queued"),
                        "errors": sum(1 for a in answers if a[1] == "error"),
                        "throughput_per_s": round(len(answers) / wall, 1),
                        "distinct_tasks": len(set(tasks)),
                    }
                )
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=60)
            if args.sites == "slurm":
                _cancel(settings.db_path)
            shutil.rmtree(home, ignore_errors=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,5000")
    parser.add_argument(
        "--settle", type=float, default=10.0, help="seconds to let placement run after each answer"
    )
    parser.add_argument("--cycle", type=float, default=2.0, help="daemon control interval")
    parser.add_argument("--complete", action="store_true", help="wait for every child")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--sessions", default="", help="e.g. 1,8,16: the many-sessions run")
    parser.add_argument("--per-session", type=int, default=10)
    parser.add_argument("--sites", choices=["process", "slurm"], default="process")
    args = parser.parse_args()
    args.sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    if args.sessions:
        args.sessions = [int(x) for x in args.sessions.split(",") if x.strip()]
        rows = anyio.run(_sessions, args)
        if args.json:
            print(json.dumps(rows, indent=2))
            return 0
        print(
            f"| sessions | submits | answer median | p99 | daemon median | answered queued "
            f"| errors | throughput | sites: {args.sites}, cycle {args.cycle:g} s |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for r in rows:
            print(
                f"| {r['sessions']} | {r['submits']} | {r['answer_median_s']:.3f} s | "
                f"{r['answer_p99_s']:.3f} s | {r['daemon_median_ms']} ms | "
                f"{r['answered_queued']} | {r['errors']} | {r['throughput_per_s']} /s | "
                f"distinct tasks {r['distinct_tasks']} |"
            )
        return 0
    out = anyio.run(_run, args)
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    settle = f"dispatched_after_{args.settle:g}s"
    print(
        f"{'children':>8} {'submit (s)':>10} {'answer (B)':>10} {'at answer':>10} "
        f"{'after ' + format(args.settle, 'g') + ' s':>12}  target"
    )
    for r in out["rows"]:
        if "error" in r:
            print(f"{r['children']:>8} error: {r['error'][:200]}")
            continue
        mark = ""
        if r["children"] == 1000:
            mark = f"<= {TARGET_S:g} s: {'pass' if r['submit_s'] <= TARGET_S else 'FAIL'}"
        print(
            f"{r['children']:>8} {r['submit_s']:>10.3f} {r['answer_bytes']:>10} "
            f"{r['dispatched_at_answer']:>10} {r[settle]:>12}  {mark}"
        )
    print(
        f"daemon peak RSS (VmHWM): {out['daemon_peak_rss_mb']} MB; "
        f"jobs cancelled at the end: {out['jobs_cancelled']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
