"""A 5,000-task sweep as a good citizen: short tasks through the real MCP client (stdio, legacy
mode, as Claude Code and Codex connect) against a real `fedhpc daemon` on the local Slurm
federation, with a per-user job limit (`max_jobs_per_user`, a center's MaxSubmit) on every
partition, so most of the sweep waits in fedhpc and is released as its jobs end.

Scenarios (each 5,000 tasks of `true` on 1 CPU): `one` = one group of 5,000 children, `fifty`
= 50 groups of 100. The MCP server carries a `command` continuation (as a resumed agent would
have), so every resume fedhpc sends is one file.

Prints per scenario: wall time (first submit to last child terminal), scheduler rejections
(attempts a scheduler refused; target 0), submissions over the limit (a submit that found
`limit` or more of the sweep's jobs alive at its partition: what MaxSubmit would have
refused; target 0), tasks per site, remote calls per site, REST p50/p99 during the sweep
(GET /v1/tasks, /v1/groups/{id}, /v1/events, /v1/health; target p99 <= 100 ms) with the
machine's load average meanwhile (the tail follows it on a shared machine), resumes
delivered (target: one per group round) and their payload bytes. At the end: the daemon's peak
RSS (VmHWM; target <= 80 MB), events and tasks stored, and the store's size on disk.

The REST calls are made by a process of its own (as a person's `fedhpc` CLI or dashboard
would be), never the benchmark's, which also runs the MCP client and watches the groups (with a
page of one child: the group's state is in every page). Each call is timed to its answer (the
request until the body is in: what the REST API delivers, the headline figure), to the answer
parsed by the client's models (what the CLI waits), and inside the daemon (Server-Timing).

Holds the local federation's test lock (tests/integration/conftest.py) while it runs.

Two knobs say where the REST tail comes from. `--loop-watch-ms` (default 50) turns on the
daemon's loop watch (FEDHPC_LOOP_WATCH_S) and prints its stalls: each time the daemon's event
loop could not answer for that long, and where its thread was. `--clusters-nice N` (default
10) runs the local federation's daemons, and so every job they start, at niceness N for the
sweep: here four clusters, their 5,000 jobs and fedhpc share two CPUs, where a real
federation's clusters are other machines, so N > 0 models that; 0 measures the shared machine
as it is. For N > 0 the kernel's autogroups are turned off meanwhile (root; restored after):
with them the CPUs are shared by session first, each job's slurmstepd starts a session of its
own, and a niceness would change nothing (benchmarks/README.md has both figures).

Run: .venv/bin/python benchmarks/sweep.py [--scenarios one,fifty] [--tasks 5000]
     [--limit 40] [--cycle 2] [--loop-watch-ms 50] [--clusters-nice 10] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import multiprocessing
import os
import re
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from contextlib import closing
from functools import partial
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from economy import RESUME  # noqa: E402
from submit_latency import _cancel, _fedhpc, _start, _vm_hwm_mb  # noqa: E402
from tests.integration.conftest import LOCK  # noqa: E402

from fedhpc.client.daemon_client import DaemonClient  # noqa: E402
from fedhpc.daemon import api  # noqa: E402
from fedhpc.ops.task_views import GroupView, TaskSummary  # noqa: E402
from fedhpc.settings.daemon import DaemonSettings  # noqa: E402
from fedhpc_dev.profiles import dev_profiles_dir, devfed_root  # noqa: E402

ENVELOPE = {"cpus": {"min": 1, "max": 1}, "wall_time": {"min": "5m", "max": "5m"}}
TARGET_RSS_MB = 80.0
TARGET_P99_MS = 100.0


# The local federation's daemons; slurmstepd and the jobs inherit slurmd's niceness.
AUTOGROUPS = Path("/proc/sys/kernel/sched_autogroup_enabled")
CLUSTER_DAEMONS = ("munged", "mariadbd", "slurmdbd", "slurmctld", "slurmscriptd", "slurmd")


def _of_devfed(proc: Path, root: str) -> bool:
    """Whether the process (or, for a slurmscriptd, its slurmctld) runs for the federation
    under `root`: its command line or environment names it."""
    for p in (proc, Path("/proc") / (proc / "stat").read_text().rsplit(")", 1)[1].split()[1]):
        if root in (p / "cmdline").read_text(errors="replace") + (p / "environ").read_text(
            errors="replace"
        ):
            return True
    return False


def _autogroup(pid: int) -> Path | None:
    """The process's autogroup file, where the kernel has autogroups (else None)."""
    path = Path("/proc") / str(pid) / "autogroup"
    return (
        path
        if path.exists() and AUTOGROUPS.exists() and AUTOGROUPS.read_text().strip() == "1"
        else None
    )


def _autogroups_off() -> str | None:
    """Turn the kernel's autogroups off for the sweep (root only); what to write back after,
    or None when they were off or cannot be turned off. Each job's slurmstepd starts a session
    of its own, and with autogroups every session gets an equal share of the CPUs whatever its
    niceness: 120 running jobs would each weigh as much as the fedhpc daemon's whole session.
    Off, the jobs inherit their slurmd's niceness like any child."""
    try:
        was = AUTOGROUPS.read_text().strip()
        if was == "0":
            return None
        AUTOGROUPS.write_text("0")
    except OSError:
        return None
    return was


Reniced = tuple[dict[int, int], dict[str, tuple[Path, int]]]


def renice_clusters(nice: int | Reniced) -> Reniced:
    """Set the local federation's daemons to niceness `nice` (or each back to its own, given
    what an earlier call returned); returns each one's niceness before, and each of their
    autogroups' (by name, with a process's file to write it through).

    With autogroups on (Debian's kernels: /proc/sys/kernel/sched_autogroup_enabled), the
    kernel shares the CPUs between sessions first and by a process's own niceness only within
    its session; every cluster daemon runs in a session of its own, so a process's niceness
    alone changes nothing against the fedhpc daemon (measured: p99 the same). Their
    autogroups are reniced too (a slurmctld and its slurmscriptd share one: it is read once)."""
    if not isinstance(nice, int):
        procs, groups = nice
        for pid, own in procs.items():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.setpriority(os.PRIO_PROCESS, pid, own)
        for path, was in groups.values():
            with contextlib.suppress(OSError):
                path.write_text(str(was))
        return nice
    root = str(devfed_root())
    procs, groups = {}, {}
    for proc in Path("/proc").iterdir():
        try:
            if not proc.name.isdigit():
                continue
            pid = int(proc.name)
            if (proc / "comm").read_text().strip() not in CLUSTER_DAEMONS or not _of_devfed(
                proc, root
            ):
                continue
            procs[pid] = os.getpriority(os.PRIO_PROCESS, pid)
            os.setpriority(os.PRIO_PROCESS, pid, nice)
            if (group := _autogroup(pid)) is not None:
                name, _, before = group.read_text().split()
                groups.setdefault(name, (group, int(before)))
                group.write_text(str(nice))
        except (ProcessLookupError, PermissionError, IndexError, ValueError, OSError):
            continue
    return procs, groups


def loop_stalls(log: Path) -> dict[str, Any]:
    """The daemon's loop-watch stalls from its log: how many, their total and worst, and the
    places its thread was seen most during them."""
    ms: list[float] = []
    places: dict[str, float] = {}
    for line in log.read_text(errors="replace").splitlines():
        if "event loop stalled" not in line or not (m := re.search(r"\bms=([\d.]+)", line)):
            continue
        ms.append(float(m.group(1)))
        if w := re.search(r"where=\[(?:'|\")\d+x ([^'\"]+)", line):
            top = w.group(1).split(" <- ")
            key = " <- ".join(top[:2])
            places[key] = places.get(key, 0.0) + float(m.group(1))
    worst = sorted(places.items(), key=lambda kv: -kv[1])[:6]
    return {
        "stalls": len(ms),
        "total_ms": round(sum(ms)),
        "max_ms": round(max(ms), 1) if ms else 0.0,
        "where_most_ms": {k: round(v) for k, v in worst},
    }


def limited_profiles(folder: Path, limit: int) -> Path:
    """The local federation's profiles with `max_jobs_per_user = limit` on every partition."""
    folder.mkdir(parents=True, exist_ok=True)
    for path in sorted(dev_profiles_dir().glob("dev*.toml")):
        text = re.sub(r"(?m)^max_jobs_per_user\s*=.*\n", "", path.read_text())
        text = re.sub(
            r'(?m)^(\[\[partitions\]\]\nname = "[^"]+"\n)',
            rf"\1max_jobs_per_user = {limit}\n",
            text,
        )
        (folder / path.name).write_text(text)
    return folder


class RestProbe:
    """Times REST calls a person or agent makes during the sweep, from a process of its own
    (`probe_process`): what it waits is the daemon and the machine, never the benchmark's MCP
    client or its polling. Each call is timed twice: the answer (the HTTP request until its
    body is in, what the REST API delivers) and the answer parsed as the CLI parses it
    (DaemonClient's models, on the probe's own CPU share)."""

    def __init__(self) -> None:
        self.ms: dict[str, list[float]] = {}  # the answer: request sent -> body in
        self.parsed_ms: dict[str, list[float]] = {}  # ... -> parsed by the client's models
        self.daemon_ms: dict[str, list[float]] = {}  # the daemon's own share (Server-Timing)
        self.load: list[float] = []  # the machine's 1-minute load average, once per round

    async def _call(self, client: DaemonClient, name: str, path: str, parse: Any) -> None:
        started = time.perf_counter()
        resp = await client.http.get(path, timeout=30)
        answered = time.perf_counter()
        if resp.status_code != 200:
            raise SystemExit(f"probe: {name} answered {resp.status_code}: {resp.text[:300]}")
        parse(resp.json())
        done = time.perf_counter()
        self.ms.setdefault(name, []).append((answered - started) * 1000)
        self.parsed_ms.setdefault(name, []).append((done - started) * 1000)
        if timing := resp.headers.get("server-timing"):
            self.daemon_ms.setdefault(name, []).append(float(timing.split("dur=")[1]))

    async def run(self, client: DaemonClient, groups: Any, stop: Any) -> None:
        """Round after round until `stop` (a multiprocessing Event) is set; `groups` (a
        multiprocessing Queue) hands on each group as it is submitted."""
        i = 0
        calls = [
            ("GET /v1/tasks?limit=100", api.TASKS.url() + "?limit=100", _tasks),
            ("GET /v1/events?limit=100", api.EVENTS.url() + "?limit=100", dict),
            ("GET /v1/health", api.HEALTH.url(), dict),
        ]
        ids: list[str] = []
        while not stop.is_set():
            while not groups.empty():
                ids.append(groups.get_nowait())
            group = [("GET /v1/groups/{id}", api.GROUP.url(ids[i % len(ids)]), _group)]
            for name, path, parse in calls + (group if ids else []):
                await self._call(client, name, path, parse)
            self.load.append(os.getloadavg()[0])
            i += 1
            await anyio.sleep(0.2)

    @staticmethod
    def _q(ms: list[float]) -> dict[str, float]:
        if len(ms) < 2:
            return {"calls": len(ms)}
        q = statistics.quantiles(ms, n=100)
        return {
            "calls": len(ms),
            "p50_ms": round(q[49], 1),
            "p99_ms": round(q[98], 1),
            "max_ms": round(max(ms), 1),
        }

    def summary(self) -> dict[str, Any]:
        def every(by: dict[str, list[float]]) -> list[float]:
            return [x for ms in by.values() for x in ms]

        load = (
            {
                "min": round(min(self.load), 1),
                "median": round(statistics.median(self.load), 1),
                "max": round(max(self.load), 1),
            }
            if self.load
            else {}
        )
        return {
            **self._q(every(self.ms)),
            "by_call": {k: self._q(v) for k, v in self.ms.items()},
            "parsed": self._q(every(self.parsed_ms)),
            "parsed_by_call": {k: self._q(v) for k, v in self.parsed_ms.items()},
            "daemon": self._q(every(self.daemon_ms)),
            "daemon_by_call": {k: self._q(v) for k, v in self.daemon_ms.items()},
            "load_average": load,
        }


def _tasks(body: dict[str, Any]) -> None:
    [TaskSummary.model_validate(t) for t in body["tasks"]]


def _group(body: dict[str, Any]) -> None:
    GroupView.model_validate(body)


def probe_process(home: str, groups: Any, stop: Any, out: Any) -> None:
    """The probe's own process (multiprocessing, spawned): its summary goes to `out`."""
    probe = RestProbe()

    async def run() -> None:
        async with DaemonClient(DaemonSettings.from_env(home=Path(home))) as client:
            await probe.run(client, groups, stop)

    anyio.run(run)
    out.put(probe.summary())


def _store_figures(db: Path, groups: list[str], limit: int) -> dict[str, Any]:
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        marks = ",".join("?" * len(groups))
        rows = conn.execute(
            "SELECT a.site, a.partition, a.job_id, a.state, a.body FROM attempts a "  # noqa: S608
            f"JOIN tasks t ON a.task_id = t.id WHERE t.group_id IN ({marks})",
            groups,
        ).fetchall()
        states = dict(
            conn.execute(
                f"SELECT state, count(*) FROM tasks WHERE group_id IN ({marks}) GROUP BY state",  # noqa: S608
                groups,
            ).fetchall()
        )
    per_site: dict[str, int] = {}
    rejected = 0
    spans: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for site, partition, job_id, _state, body in rows:
        b = json.loads(body)
        if job_id is None:
            rejected += 1 if b.get("reason") else 0
            continue
        per_site[site] = per_site.get(site, 0) + 1
        if b.get("submitted_at") and b.get("ended_at"):
            spans.setdefault((site, partition), []).append((b["submitted_at"], b["ended_at"]))
    over = 0
    for runs in spans.values():
        ends: list[str] = []
        for sub, end in sorted(runs):
            ends = [e for e in ends if e > sub]  # jobs still alive when this one was submitted
            over += len(ends) >= limit
            ends.append(end)
    return {
        "attempts": len(rows),
        "scheduler_rejections": rejected,
        "submissions_over_limit": over,
        "tasks_per_site": dict(sorted(per_site.items())),
        "task_states": states,
    }


def _resumes(folder: Path) -> tuple[int, int]:
    files = sorted(folder.glob("resume.*.json"))
    return len(files), sum(f.stat().st_size for f in files)


async def _scenario(  # noqa: PLR0917 (one call site)
    name: str, n: int, mcp: Client, client: DaemonClient, db: Path, resumed: Path, limit: int
) -> dict[str, Any]:
    sizes = [n] if name == "one" else [n // 50] * 50
    before = _resumes(resumed)
    groups: list[str] = []
    spawn = multiprocessing.get_context("spawn")
    submitted, stop, summary = spawn.Queue(), spawn.Event(), spawn.Queue()
    probe = spawn.Process(
        target=probe_process, args=(str(client.settings.home), submitted, stop, summary)
    )
    probe.start()
    started = time.monotonic()
    try:
        submit_s = []
        for g, size in enumerate(sizes):
            children = [{"command": ["true"], "name": f"c{i}"} for i in range(size)]
            t0 = time.monotonic()
            result = await mcp.call_tool(
                "submit_group",
                {
                    "objective": f"sweep {name}: group {g} of {size}",
                    "children": children,
                    "envelope": ENVELOPE,
                },
            )
            submit_s.append(time.monotonic() - t0)
            text = "".join(getattr(c, "text", "") for c in result.content)
            if result.is_error:
                raise SystemExit(f"submit_group failed: {text[:500]}")
            groups.append(json.loads(text)["group_id"])
            submitted.put(groups[-1])
        with anyio.fail_after(3600):
            for gid in groups:  # a page of one child: the state is the whole group's
                while (await client.group(gid, limit=1)).state in ("placing", "running"):  # noqa: ASYNC110
                    await anyio.sleep(1)
        wall = time.monotonic() - started
    finally:
        stop.set()
    rest = await anyio.to_thread.run_sync(partial(summary.get, timeout=60))
    await anyio.to_thread.run_sync(probe.join, 30)
    # One resume per group round: wait for them (the bridge delivers after the event).
    want = before[0] + len(groups)
    with anyio.move_on_after(120):
        while _resumes(resumed)[0] < want:  # noqa: ASYNC110
            await anyio.sleep(0.5)
    await anyio.sleep(3)  # anything more (a resume per child would show here) also lands
    after = _resumes(resumed)
    return {
        "scenario": name,
        "tasks": sum(sizes),
        "groups": len(groups),
        "wall_s": round(wall, 1),
        "submit_s_max": round(max(submit_s), 2),
        **_store_figures(db, groups, limit),
        "rest": rest,
        "resumes": after[0] - before[0],
        "resume_payload_bytes": after[1] - before[1],
        "group_ids": groups,
    }


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="fedhpc-sweep-bench-"))
    profiles = limited_profiles(home / "profiles", args.limit)
    (home / "config.toml").write_text(f'profile_dirs = ["{profiles}"]\n')
    resumed = home / "resumed"
    resumed.mkdir()
    if args.loop_watch_ms > 0:
        os.environ["FEDHPC_LOOP_WATCH_S"] = str(args.loop_watch_ms / 1000)
    daemon, env = _start(home, args.cycle, "1" if args.sites == "slurm" else "process")
    settings = DaemonSettings.from_env(home=home)
    continuation = {"runtime": "command", "command": ["bash", "-c", RESUME, "agent", str(resumed)]}
    mcp_env = {**env, "FEDHPC_CONTINUATION": json.dumps(continuation)}
    out: dict[str, Any] = {
        "limit_per_partition": args.limit,
        "sites": args.sites,
        "clusters_nice": args.clusters_nice,
        "scenarios": [],
    }
    groups: list[str] = []
    try:
        async with DaemonClient(settings) as client:
            await client.wait_until_up(30)
            await client.refresh()
            params = StdioServerParameters(
                command=_fedhpc(), args=["serve", "--no-autostart"], env=mcp_env
            )
            async with Client(params, mode="legacy") as mcp:
                await mcp.list_tools()
                for name in args.scenarios:
                    row = await _scenario(
                        name, args.tasks, mcp, client, settings.db_path, resumed, args.limit
                    )
                    groups += row.pop("group_ids")
                    out["scenarios"].append(row)
            out["remote_calls"] = (await client.health()).get("remote_calls")
        out["daemon_peak_rss_mb"] = round(_vm_hwm_mb(daemon.pid), 1)
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
    if args.loop_watch_ms > 0:
        out["loop_watch_ms"] = args.loop_watch_ms
        out["loop_stalls"] = loop_stalls(home / "daemon.log")
    with closing(sqlite3.connect(f"file:{settings.db_path}?mode=ro", uri=True)) as conn:
        out["events_stored"] = conn.execute("SELECT count(*) FROM events").fetchone()[0]
        out["tasks_stored"] = conn.execute("SELECT count(*) FROM tasks").fetchone()[0]
    db = settings.db_path
    out["store_bytes"] = sum(p.stat().st_size for p in db.parent.glob(db.name + "*"))
    if args.sites == "slurm":
        out["jobs_cancelled_at_end"] = _cancel(db, groups) if groups else 0
    shutil.rmtree(home, ignore_errors=True)
    return out


def _print(out: dict[str, Any]) -> None:
    print(
        f"sites: {out['sites']}; per-user job limit on every partition: "
        f"{out['limit_per_partition']}"
    )
    if out["sites"] == "slurm":
        print(
            f"local clusters' niceness during the sweep: {out['clusters_nice']} (autogroups "
            f"off meanwhile: {out.get('autogroups_off_meanwhile', False)}); "
            + (
                "they stand in for other machines"
                if out["clusters_nice"] > 0
                else "they share the two CPUs with fedhpc as equals"
            )
        )
    for r in out["scenarios"]:
        rest = r["rest"]
        print(f"\n== {r['scenario']}: {r['tasks']} tasks in {r['groups']} group(s)")
        print(
            f"  wall time (submit -> last child terminal): {r['wall_s']} s "
            f"(slowest submit_group answer {r['submit_s_max']} s)"
        )
        print(f"  task states: {r['task_states']}")
        print(
            f"  scheduler rejections: {r['scheduler_rejections']} (target 0); submissions "
            f"over the limit: {r['submissions_over_limit']} (target 0)"
        )
        print(f"  tasks per site: {r['tasks_per_site']}")
        p99 = rest.get("p99_ms", float("nan"))
        print(
            f"  REST during the sweep: {rest['calls']} calls, p50 {rest.get('p50_ms')} ms, "
            f"p99 {p99} ms (target <= {TARGET_P99_MS:g}: "
            f"{'pass' if p99 <= TARGET_P99_MS else 'FAIL'}), max {rest.get('max_ms')} ms"
        )
        for call, q in rest["by_call"].items():
            own = rest["daemon_by_call"].get(call, {})
            print(
                f"    {call}: p50 {q.get('p50_ms')} ms, p99 {q.get('p99_ms')} ms "
                f"(the daemon's own: p50 {own.get('p50_ms')}, p99 {own.get('p99_ms')})"
            )
        parsed = rest["parsed"]
        print(
            f"    the answer parsed by the client's models too (what `fedhpc` CLI waits): "
            f"p50 {parsed.get('p50_ms')} ms, p99 {parsed.get('p99_ms')} ms"
        )
        own = rest["daemon"]
        print(
            f"    the daemon's own answer time (Server-Timing), all calls: p50 "
            f"{own.get('p50_ms')} ms, p99 {own.get('p99_ms')} ms; the rest of each wait is "
            "the socket, the client and the machine's run queue"
        )
        if load := rest.get("load_average"):
            print(
                f"    machine load average (1 min) meanwhile: {load['min']} - {load['max']}"
                f" (median {load['median']}): the tail depends on it"
            )
        print(
            f"  resumes delivered: {r['resumes']} for {r['groups']} group round(s) "
            f"({'pass' if r['resumes'] == r['groups'] else 'FAIL'}); continuation payload "
            f"{r['resume_payload_bytes']} B in total"
        )
    rss = out["daemon_peak_rss_mb"]
    print(
        f"\ndaemon peak RSS (VmHWM): {rss} MB (target <= {TARGET_RSS_MB:g}: "
        f"{'pass' if rss <= TARGET_RSS_MB else 'FAIL'})"
    )
    print(f"remote calls per site: {out.get('remote_calls')}")
    if stalls := out.get("loop_stalls"):
        print(
            f"daemon event loop stalls over {out['loop_watch_ms']} ms: {stalls['stalls']} "
            f"({stalls['total_ms']} ms in all, worst {stalls['max_ms']} ms); where most:"
        )
        for where, ms in stalls["where_most_ms"].items():
            print(f"    {ms} ms  {where}")
    print(
        f"store at the end: {out['store_bytes'] / 1e6:.1f} MB, {out['events_stored']} events, "
        f"{out['tasks_stored']} tasks"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default="one,fifty")
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--limit", type=int, default=40, help="max_jobs_per_user everywhere")
    parser.add_argument("--cycle", type=float, default=2.0, help="daemon control interval")
    parser.add_argument(
        "--sites",
        choices=["slurm", "process"],
        default="slurm",
        help="the local Slurm federation, or its process-mode twin (no Slurm, "
        "no lock; a preview, not the issue's figure)",
    )
    parser.add_argument(
        "--loop-watch-ms",
        type=float,
        default=50.0,
        help="report the daemon's event-loop stalls longer than this (0: off)",
    )
    parser.add_argument(
        "--clusters-nice",
        type=int,
        default=10,
        help="niceness of the local Slurm federation's daemons and jobs during the sweep "
        "(they are other machines in a real federation; the kernel's autogroups are off "
        "meanwhile, root only); each restored after. 0: they share the CPUs with fedhpc "
        "as equals",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    args.scenarios = [s for s in args.scenarios.split(",") if s in ("one", "fifty")]
    if args.sites == "process":
        out = anyio.run(_run, args)
        print(json.dumps(out, indent=2)) if args.json else _print(out)
        return 0
    with LOCK.open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            sys.stderr.write(f"sweep: waiting for {LOCK} (a test run holds the federation)\n")
            fcntl.flock(lock, fcntl.LOCK_EX)
        reniced = renice_clusters(args.clusters_nice) if args.clusters_nice else ({}, {})
        grouped = _autogroups_off() if args.clusters_nice else None
        try:
            out = anyio.run(_run, args)
        finally:
            renice_clusters(reniced)
            if grouped is not None:
                AUTOGROUPS.write_text(grouped)
        out["autogroups_off_meanwhile"] = grouped is not None
    print(json.dumps(out, indent=2)) if args.json else _print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
