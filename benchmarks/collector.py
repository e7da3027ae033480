"""Collector cost on the four-site local federation: remote calls, concurrency, daemon footprint.

Run: .venv/bin/python benchmarks/collector.py [--refreshes 20] [--json]
Needs the local test federation (`fedhpc devfed up`, as root); exits 2 when it is down.
A measurement, not a test: it marks pass/fail against the issue-3 targets and otherwise exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import structlog
from anyio.abc import Process

from fedhpc.adapters.command import Command, CommandResult
from fedhpc.adapters.site import SiteAdapter
from fedhpc.adapters.transports import Transport, make_transport
from fedhpc.client.daemon_client import DaemonClient
from fedhpc.collector import Collector
from fedhpc.domain.config import Site, UserConfig
from fedhpc.domain.site import Health
from fedhpc.errors import FedError
from fedhpc.logs import configure_logging
from fedhpc.profiles import load_federation
from fedhpc.settings.daemon import DaemonSettings
from fedhpc.store import Store

log = structlog.get_logger("benchmarks.collector")

TARGET_CALLS = 1
TARGET_RATIO = 1.2
TARGET_RSS_MB = 60.0
PAPER_CALLS_PER_ROUND = 28.6  # remote requests per collector round, for 4 systems
PAPER_SYSTEMS = 4
PAPER_RSS_MB = 108.0
DAEMON_REFRESH_S = "0.5"
GET_EVERY_S = 4.0  # GET /v1/federation while the daemon runs, so the REST path is in the peak
CLK_TCK = os.sysconf("SC_CLK_TCK")


class FederationDown(Exception):
    """The local federation is not there to measure."""


class CountingTransport:
    """A real transport plus a tally of `run` calls: our own count of remote calls, independent
    of `Collector.remote_calls`."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.name = inner.name
        self.calls = 0

    async def run(self, command: Command) -> CommandResult:
        self.calls += 1
        return await self.inner.run(command)

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclass
class CollectorRun:
    refreshes: int
    calls: dict[str, int]  # Transport.run calls per site over the measured refreshes
    collector_counter: dict[str, int]  # Collector.remote_calls over the same refreshes
    ratios: list[float] = field(default_factory=list)  # wall_s / slowest probe, per refresh
    probes_s: list[float] = field(default_factory=list)  # every single-site probe
    offline: list[str] = field(default_factory=list)  # 'site: error' per offline probe


@dataclass
class DaemonRun:
    refreshes: float = 0.0  # full-federation refreshes (site probes / sites) in the CPU window
    site_probes: int = 0
    peak_rss_mb: float | None = None
    cpu_s: float | None = None  # the daemon's own utime+stime in the window
    child_cpu_s: float | None = None  # reaped probe processes (bash, sinfo, squeue...)
    offline: list[str] = field(default_factory=list)  # 'site: error' per offline probe
    gets: int = 0
    view_changes: int = 0  # distinct collected_at values seen through GET /v1/federation
    exit_code: int | None = None
    error: str | None = None


def devfed_sites() -> dict[str, Site]:
    os.environ["FEDHPC_DEVFED"] = "1"
    # An empty user config: sites the user configured (real centers) stay out of the benchmark.
    sites = load_federation(UserConfig())
    return {name: site for name, site in sorted(sites.items()) if site.profile.local_test}


async def measure_collector(sites: dict[str, Site], n: int, tmp: Path) -> CollectorRun:
    counting = {
        name: CountingTransport(make_transport(site.transport, state_dir=tmp, name=name))
        for name, site in sites.items()
    }
    adapters = {name: SiteAdapter(site, counting[name]) for name, site in sites.items()}
    store = await Store.open(tmp / "b.db")
    try:
        collector = Collector(sites, adapters, store)
        # One unmeasured round: warms caches and tells us whether the federation is up at all.
        await collector.refresh(force=True)
        offline = {
            name: state.error or "offline"
            for name, state in collector.latest.items()
            if state.health is Health.OFFLINE
        }
        if offline:
            raise FederationDown("; ".join(f"{k}: {v}" for k, v in sorted(offline.items())))
        calls0 = {name: t.calls for name, t in counting.items()}
        counter0 = dict(collector.remote_calls)
        run = CollectorRun(n, {}, {})
        for i in range(n):
            report = await collector.refresh(force=True)
            if report.slowest_s > 0:
                run.ratios.append(report.wall_s / report.slowest_s)
            run.probes_s.extend(report.probed.values())
            # An offline probe still made its one call; it is kept, and named in the report.
            run.offline += [
                f"{s}: {collector.latest[s].error}"
                for s in report.probed
                if collector.latest[s].health is Health.OFFLINE
            ]
            log.info("refresh", n=i + 1, wall_s=round(report.wall_s, 3))
        run.calls = {name: t.calls - calls0[name] for name, t in counting.items()}
        run.collector_counter = {s: collector.remote_calls[s] - counter0.get(s, 0) for s in sites}
        return run
    finally:
        with anyio.CancelScope(shield=True):
            for transport in counting.values():
                await transport.aclose()
            await store.close()


def _proc_cpu(pid: int) -> tuple[float, float]:
    """(utime+stime, cutime+cstime) in seconds, from /proc/<pid>/stat (proc(5))."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()  # the command name may contain spaces
    utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
    return (utime + stime) / CLK_TCK, (cutime + cstime) / CLK_TCK


def _vm_hwm_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024 / 1e6  # kB (KiB) -> MB (10^6 bytes)
    raise LookupError(f"no VmHWM for pid {pid}")


async def _stop(process: Process, run: DaemonRun) -> None:
    with anyio.CancelScope(shield=True):
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            with anyio.move_on_after(30):
                await process.wait()
        if process.returncode is None:
            problem = "did not exit 30 s after SIGTERM; killed"
            run.error = f"{run.error}; {problem}" if run.error else problem
            process.kill()
            await process.wait()
        run.exit_code = process.returncode
        await process.aclose()


async def measure_daemon(n_sites: int, n: int, tmp: Path) -> DaemonRun:
    """The real `fedhpc daemon` refreshing every 0.5 s (each devfed profile raises that to its
    `min_refresh_s`), until it has made `n` more full refreshes after its first one."""
    settings = DaemonSettings(home=tmp / "home", refresh_s=float(DAEMON_REFRESH_S))
    settings.home.mkdir(mode=0o700)
    env = {
        **os.environ,
        "FEDHPC_HOME": str(settings.home),
        "FEDHPC_DEVFED": "1",
        "FEDHPC_REFRESH_S": DAEMON_REFRESH_S,
        "FEDHPC_GRACE_S": "2",
        "FEDHPC_HISTORY_KEEP": str(10 * n + 100),  # nothing pruned while we count snapshots
    }
    run = DaemonRun()
    with settings.log_path.open("wb") as out:
        process = await anyio.open_process(
            [sys.executable, "-m", "fedhpc.cli.main", "daemon"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            env=env,
        )
    try:
        async with DaemonClient(settings) as client:
            await client.wait_until_up(timeout_s=30)
            pid = int(settings.lock_path.read_text().split()[0])
            store = await Store.open_readonly(settings.db_path)
            try:
                await _watch(client, store, pid, n_sites=n_sites, n=n, run=run)
            finally:
                with anyio.CancelScope(shield=True):
                    await store.close()
    except (FedError, OSError, LookupError) as exc:
        # The log goes with the temporary folder: keep its last lines in the report.
        tail = settings.log_path.read_text(errors="replace").splitlines()[-3:]
        run.error = f"{type(exc).__name__}: {exc}; daemon log ends: {' | '.join(tail)}"
    finally:
        await _stop(process, run)
    return run


async def _watch(
    client: DaemonClient, store: Store, pid: int, *, n_sites: int, n: int, run: DaemonRun
) -> None:
    # CPU per refresh: the daemon's utime+stime (its own Python work: spawning and reading the
    # probe script, parsing, SQLite, the few GETs below) sampled once its first full refresh is
    # stored, and again after `n` more, divided by the refreshes in between. The snapshots table
    # gets one row per site probe, so refreshes = new rows / sites; that also counts rounds the
    # collector split across several wake-ups. Starting after the first refresh keeps
    # interpreter start-up and imports out. Probe children's CPU (reaped, so in cutime+cstime)
    # is reported apart: it is Slurm's client tools, not the daemon.
    deadline = time.monotonic() + 60 + n * 20.0
    while await store.count("snapshots") < n_sites:
        if time.monotonic() > deadline:
            raise LookupError("the daemon stored no full refresh")
        await anyio.sleep(0.1)
    rows0 = await store.count("snapshots")
    own0, child0 = _proc_cpu(pid)
    since = datetime.now(UTC)
    seen: set[str] = set()
    next_get = 0.0
    rows = rows0
    while rows < rows0 + n * n_sites and time.monotonic() < deadline:
        if time.monotonic() >= next_get:
            view = await client.federation()
            run.gets += 1
            seen.update(s.collected_at.isoformat() for s in view.sites if s.collected_at)
            next_get = time.monotonic() + GET_EVERY_S
        await anyio.sleep(0.2)
        rows = await store.count("snapshots")
    own1, child1 = _proc_cpu(pid)
    run.peak_rss_mb = _vm_hwm_mb(pid)
    run.site_probes = rows - rows0
    run.refreshes = run.site_probes / n_sites
    run.view_changes = len(seen)
    for site in sorted(await store.latest_site_states()):
        history = await store.site_history(site, limit=run.site_probes + n_sites)
        run.offline += [
            f"{site}: {h.error}"
            for h in history
            if h.collected_at >= since and h.health is Health.OFFLINE
        ]
    if run.refreshes:
        run.cpu_s = own1 - own0
        run.child_cpu_s = child1 - child0
    if rows < rows0 + n * n_sites:
        run.error = f"stopped at the deadline after {run.refreshes:g} refreshes"


async def slurm_version(site: Site, tmp: Path) -> str:
    """`sinfo -V` through the site's own transport (which supplies its SLURM_CONF)."""
    transport = make_transport(site.transport, state_dir=tmp)
    try:
        result = await transport.run(Command(("sinfo", "-V"), timeout_s=15))
    except FedError as exc:
        return f"unknown ({exc.message})"
    finally:
        await transport.aclose()
    return result.stdout.strip() or f"unknown (sinfo -V exit {result.returncode})"


def _fmt(value: float | None, digits: int) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _verdict(ok: bool | None) -> str:
    return "-" if ok is None else ("pass" if ok else "FAIL")


def _row(
    metric: str,
    value: float | None,
    digits: int,
    *,
    target: str = "-",
    paper: float | None = None,
    ok: bool | None = None,
) -> dict[str, Any]:
    return {
        "metric": metric,
        "value": value,
        "shown": _fmt(value, digits),
        "target": target,
        "paper": paper,
        "result": _verdict(ok),
    }


def metrics(col: CollectorRun, dmn: DaemonRun) -> list[dict[str, Any]]:
    worst = max(col.calls.values()) / col.refreshes
    exact = all(c == TARGET_CALLS * col.refreshes for c in col.calls.values())
    ratio = statistics.median(col.ratios) if col.ratios else None
    probe = statistics.median(col.probes_s) if col.probes_s else None
    per = dmn.refreshes or None
    cpu = dmn.cpu_s / per if per and dmn.cpu_s is not None else None
    child = dmn.child_cpu_s / per if per and dmn.child_cpu_s is not None else None
    rss = dmn.peak_rss_mb
    return [
        _row(
            "remote calls per site per refresh",
            worst,
            2,
            target=f"= {TARGET_CALLS}",
            paper=PAPER_CALLS_PER_ROUND / PAPER_SYSTEMS,
            ok=exact,
        ),
        _row(
            "refresh wall / slowest site probe (median)",
            ratio,
            3,
            target=f"<= {TARGET_RATIO}",
            ok=None if ratio is None else ratio <= TARGET_RATIO,
        ),
        _row("single-site probe latency, median (s)", probe, 3),
        _row(
            "daemon peak RSS, VmHWM (MB)",
            rss,
            1,
            target=f"<= {TARGET_RSS_MB:g}",
            paper=PAPER_RSS_MB,
            ok=None if rss is None else rss <= TARGET_RSS_MB,
        ),
        _row("daemon CPU per refresh (s)", cpu, 4),
        _row("  + its probe child processes (s)", child, 4),
    ]


def _cells(m: dict[str, Any]) -> tuple[str, ...]:
    paper = "-" if m["paper"] is None else f"{m['paper']:g}"
    return (m["metric"], m["shown"], m["target"], paper, m["result"])


def render(report: dict[str, Any]) -> str:
    head = ("metric", "value", "target", "paper", "result")
    rows = [_cells(m) for m in report["metrics"]]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]

    def line(r: tuple[str, ...]) -> str:
        cells = [
            r[0].ljust(widths[0]),
            *(c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)),
        ]
        return "  ".join(cells)

    col, dmn = report["collector"], report["daemon"]
    out = [
        f"fedhpc collector benchmark, {report['date']}: {', '.join(report['sites'])}",
        line(head),
        *(line(r) for r in rows),
        f"machine: {report['machine']}, {report['cpus']} CPUs; Python {report['python']}; "
        f"Slurm: {report['slurm']}",
        f"collector: {col['refreshes']} forced refreshes after 1 warm-up; run() calls per site "
        f"{col['calls']} (collector's own counter {col['collector_counter']}); "
        f"offline probes: {'; '.join(col['offline']) or 'none'}",
        f"daemon: FEDHPC_REFRESH_S={DAEMON_REFRESH_S} (min_refresh_s applies), "
        f"{dmn['refreshes']:g} refreshes ({dmn['site_probes']} site probes) measured, "
        f"{dmn['gets']} GET /v1/federation ({dmn['view_changes']} distinct collected_at), "
        f"exit code {dmn['exit_code']}; offline probes: {'; '.join(dmn['offline']) or 'none'}",
        "paper: 28.6 remote requests per round for 4 systems (7.15 per site), 108 MB peak RSS",
    ]
    if dmn["error"]:
        out.append(f"daemon problem: {dmn['error']}")
    return "\n".join(out)


async def main_async(n: int) -> dict[str, Any]:
    sites = devfed_sites()
    if len(sites) != 4:
        raise FederationDown(f"expected the 4 devfed sites, found {sorted(sites) or 'none'}")
    with tempfile.TemporaryDirectory(prefix="fedhpc-bench-") as tmpdir:
        tmp = Path(tmpdir)
        version = await slurm_version(next(iter(sites.values())), tmp)
        log.info("collector phase", refreshes=n)
        col = await measure_collector(sites, n, tmp)
        log.info("daemon phase", refreshes=n)
        dmn = await measure_daemon(len(sites), n, tmp)
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "sites": list(sites),
        "machine": f"{platform.platform()} {platform.machine()}",
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "slurm": version,
        "metrics": metrics(col, dmn),
        "collector": asdict(col),
        "daemon": asdict(dmn),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--refreshes", type=int, default=20, help="refreshes to measure (20)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args()
    if args.refreshes < 1:
        parser.error("--refreshes must be at least 1")
    configure_logging()
    try:
        report = anyio.run(main_async, args.refreshes)
    except FederationDown as exc:
        print(f"the local federation is down: {exc}", file=sys.stderr)
        print("To fix: fedhpc devfed up (as root), then run this again.", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
