"""`fedhpc daemon` and `fedhpc status`: run the control service; show the federation."""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

import anyio

from fedhpc.cli.pictures import watch_status
from fedhpc.cli.table import table_lines
from fedhpc.client.daemon_client import DaemonClient
from fedhpc.client.errors import DaemonUnavailable
from fedhpc.client.start import start_daemon
from fedhpc.errors import UsageError
from fedhpc.ops.inspect import (
    FEDERATION_COLUMNS,
    FederationView,
    InspectRequest,
    federation_rows,
)
from fedhpc.settings.daemon import DaemonSettings
from fedhpc.terminal import for_terminal

__all__ = ["add_parser", "stop_daemon"]


def _holder(settings: DaemonSettings) -> int | None:
    """The pid of the daemon holding this home's lock, or None when none runs."""
    if not settings.lock_path.exists():
        return None
    with settings.lock_path.open("a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            text = fh.read().strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(fh, fcntl.LOCK_UN)
    return None


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(errors="replace")
    except OSError:
        return False
    return ") Z " not in stat


def stop_daemon(settings: DaemonSettings, *, wait_s: float | None = None) -> int | None:
    """SIGTERM the running daemon and wait until it released its lock (SIGKILL after the
    grace); the pid it had, or None when none ran. Resumes it started keep running and are
    settled by the next daemon."""
    pid = _holder(settings)
    if pid is None:
        return None
    if pid <= 0:
        raise UsageError(f"the daemon lock {settings.lock_path} holds no pid")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + (wait_s if wait_s is not None else settings.grace_s + 20)
    while _holder(settings) is not None:
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
        time.sleep(0.1)
    gone = time.monotonic() + 10  # the lock is released on the way out: wait for the exit
    while _running(pid) and time.monotonic() < gone:
        time.sleep(0.05)
    return pid


def _control(args: argparse.Namespace) -> int:

    settings = DaemonSettings.from_env()
    pid = stop_daemon(settings)
    print(f"stopped the daemon (pid {pid})" if pid else f"no daemon ran for {settings.home}")
    if args.action == "stop":
        return 0

    async def up() -> None:
        async with DaemonClient(settings) as client:
            await client.wait_until_up(30)

    new = start_daemon(settings)
    anyio.run(up)
    print(f"started the daemon (pid {new}), log {settings.log_path}")
    return 0


def _exec_lean(args: argparse.Namespace) -> NoReturn:
    """Re-run as `python -m fedhpc.daemon` (same pid): a process that never loads rich (and,
    with `[service.facade]`, re-runs as the daemon holding each person's tokens)."""
    argv = ["--once"] if args.once else []
    if args.refresh is not None:
        argv += ["--refresh", str(args.refresh)]
    os.execv(sys.executable, [sys.executable, "-m", "fedhpc.daemon", *argv])  # noqa: S606


def _plain(text: str) -> str:
    """`text` with its control characters shown escaped: an error may quote what an agent
    sent."""
    return for_terminal(text)[:500]


def store_lines(health: dict[str, Any]) -> list[str]:
    """On a shared (PostgreSQL) store: whether this daemon leads it or follows, and who
    leads; nothing on SQLite, where the one daemon does all."""
    store = health.get("store") or {}
    if store.get("error"):
        return [f"store: {for_terminal(str(store['error']))} (the daemon retries by itself)"]
    if store.get("engine") != "postgresql":
        return []
    if store.get("lease_token") is not None:
        return [f"store: PostgreSQL, this daemon leads it (lease token {store['lease_token']})"]
    leader = store.get("leader") or {}
    who = leader.get("holder") or "no daemon yet"
    if leader and not leader.get("live"):
        who = f"{who}, whose lease lapsed: another daemon takes over"
    return [f"store: PostgreSQL, this daemon follows: it answers; the leader is {who}"]


def pace_lines(health: dict[str, Any]) -> list[str]:
    """Each site's scheduler commands: in the last minute, the most in any minute since the
    daemon started, and the site's cap (`max_commands_per_min`), with the time commands
    waited under it; nothing before the daemon sent any."""
    calls = health.get("remote_calls") or {}
    shown = []
    for site, c in sorted(calls.items()):
        if not isinstance(c, dict) or "cap_per_min" not in c or not c.get("peak_per_min"):
            continue
        waited = float(c.get("waited_s") or 0)
        held = f" (waited {waited:.0f} s)" if waited >= 1 else ""
        shown.append(
            f"{for_terminal(str(site))} {c.get('per_min', 0)}/{c.get('peak_per_min', 0)}/"
            f"{c['cap_per_min']}{held}"
        )
    if not shown:
        return []
    return ["scheduler commands a minute (last, peak, cap): " + ", ".join(shown)]


def _status_lines(health: dict[str, Any], pid: int | None, now: float) -> list[str]:
    """The running daemon for people: since when, how many cycles, its newest errors (one
    line per kind, with its count and age; the traceback is in the daemon's log)."""
    lines = [
        f"daemon running (pid {pid}) since {health.get('started_at', '?')}, "
        f"{health.get('cycles', 0)} control cycles of {health.get('cycle_s', '?')} s, "
        f"sites: {', '.join(health.get('sites', [])) or 'none'}"
    ]
    lines += store_lines(health) + pace_lines(health)
    errors = list(health.get("errors") or [])
    if not errors:
        lines.append("no errors logged since it started")
        return lines
    lines.append(f"{len(errors)} kinds of error logged since it started (newest last):")
    for e in errors:
        where = " ".join(f"{k}={v}" for k, v in sorted(e.get("context", {}).items()))
        age = max(0.0, now - float(e.get("last_at", now)))
        lines.append(
            f"  {e.get('event')}: {_plain(str(e.get('error') or '-'))} "
            f"[{e.get('count', 1)}x, last {age:.0f} s ago]" + (f" {_plain(where)}" if where else "")
        )
    return lines


def _daemon_status(args: argparse.Namespace) -> int:
    settings = DaemonSettings.from_env()
    pid = _holder(settings)
    if pid is None:
        print(f"no daemon runs for {settings.home}")
        return 1

    async def read() -> dict[str, Any]:
        async with DaemonClient(settings) as client:
            return await client.health()

    health = anyio.run(read)
    if args.json:
        print(json.dumps({"pid": pid, **health}, indent=2))
    else:
        print("\n".join(_status_lines(health, pid, time.time())))
        print(f"log: {settings.log_path}")
    return 0


def _daemon(args: argparse.Namespace) -> int:
    if args.action in ("stop", "restart"):
        return _control(args)
    if args.action == "status":
        return _daemon_status(args)
    _exec_lean(args)


Extras = tuple[list[dict[str, Any]], dict[str, Any] | None, dict[str, Any]]
BURN_PROBES = 60  # the recent probes an allocation's pace is read over in `fedhpc status`


async def _view(
    settings: DaemonSettings, req: InspectRequest, refresh: bool
) -> tuple[FederationView, Extras]:
    """The federation view, the wait estimators' recent errors, the wait placement predicts
    now for the reference requests and each expiring allocation's burn-down (all three only
    from a daemon)."""

    async with DaemonClient(settings) as client:
        try:
            view = await (client.refresh(req) if refresh else client.federation(req))
            estimators = (await client.estimators()).get("estimators", [])
            outlook = await client.outlook()
            burn = (await client.history(limit=BURN_PROBES, credit=True)).get("burn", {})
        except DaemonUnavailable:
            if not settings.db_path.exists():
                raise
        else:
            return view, (estimators, outlook, burn)
    from fedhpc.daemon.offline import stored_federation  # the store only when no daemon runs

    return await stored_federation(settings, req), ([], None, {})


def burn_lines(burn: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """Each allocation with an expiry in the config: when it runs out at the recent pace, or
    what would be left unspent (placement.burn)."""
    lines = [
        f"  {site} {account}: expires {b['expires']} ({b['days_left']:.0f} days left): "
        f"{b['verdict']}"
        for site, accounts in sorted(burn.items())
        for account, b in sorted(accounts.items())
    ]
    return (
        ["", "Allocations that expire (at the pace of the recent probes):", *lines] if lines else []
    )


def _outlook_cell(r: dict[str, Any] | None) -> str:
    if r is None:
        return "-"
    return "cannot run" if r["wait_s"] is None else f"{r['wait_s']:.0f}s {r['method']}"


def outlook_table(body: dict[str, Any] | None, view: FederationView) -> list[str]:
    """Per partition the view shows, the wait placement predicts now for each reference
    request (1 GPU, 1 node, 4 GPUs) and its estimator, or "cannot run"."""
    if not body or not body.get("rows"):
        return []
    shown = {(s.site, p.name) for s in view.sites for p in s.partitions}
    requests: list[str] = body["requests"]
    cells: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for r in body["rows"]:
        if (r["site"], r["partition"]) in shown:
            cells.setdefault((r["site"], r["partition"]), {})[r["request"]] = r
    if not cells:
        return []
    table = [("SITE", "PARTITION", *(q.upper() for q in requests))]
    for (site, part), by in sorted(cells.items()):
        table.append((site, part, *(_outlook_cell(by.get(q)) for q in requests)))
    at = datetime.fromisoformat(body["at"]).astimezone(UTC)
    head = ["", f"Wait fedhpc would predict now (placement's, {at:%Y-%m-%d %H:%M:%S} UTC):"]
    return head + table_lines(table)


def _estimator_table(rows: list[dict[str, Any]]) -> list[str]:
    """Per site and partition, each estimator's recent median |predicted - observed| wait and
    how often its p10-p90 band held (goal 80 %; placement.calibration)."""
    if not rows:
        return []
    table = [
        ("SITE", "PARTITION", "ESTIMATOR", "JOBS", "MEDIAN |ERROR|", "MEDIAN BIAS", "P10-P90 HELD")
    ]
    for r in rows:
        err, bias = f"{r['median_abs_error_s']:.0f}s", f"{r['median_bias_s']:+.0f}s"
        cov = r.get("coverage")
        held = "-" if cov is None else f"{cov:.0%} of {r.get('scored', 0)}"
        table.append((r["site"], r["partition"], r["method"], str(r["n"]), err, bias, held))
    head = ["", "Wait estimators (predicted at placement vs the wait accounting reported):"]
    return head + table_lines(table)


def _table(view: FederationView) -> list[str]:
    lines = table_lines([FEDERATION_COLUMNS, *(cells for _, cells in federation_rows(view))])
    lines += [f"{s.site}: {for_terminal(s.error)}" for s in view.sites if s.error]
    return lines


def _status(args: argparse.Namespace) -> int:
    settings = DaemonSettings.from_env()
    req = InspectRequest(
        sites=tuple(args.site),
        accelerator=args.accelerator,
        arch=args.arch,
        include_blocked=args.all,
    )
    if args.watch:
        if args.json:
            raise UsageError(
                "--watch draws a live table; it has no --json form",
                hint="Poll `fedhpc status --json` instead.",
            )

        return watch_status(settings, req, args)
    if args.refresh and not args.json and sys.stdout.isatty():  # a probe takes seconds
        # startup: rich's spinner only when a person waits at a terminal
        from fedhpc.ui.term import waiting

        with waiting("probing every site"):
            view, (estimators, outlook, burn) = anyio.run(_view, settings, req, args.refresh)
    else:
        view, (estimators, outlook, burn) = anyio.run(_view, settings, req, args.refresh)
    if args.json:  # the FederationView, each estimator's error, the wait predicted now
        body = view.model_dump(mode="json")
        extra = {"estimators": estimators, "outlook": outlook, "burn": burn}
        print(json.dumps({**body, **extra}, indent=2))
    else:
        leads = anyio.run(_leader_lines, settings)
        more = _estimator_table(estimators) + outlook_table(outlook, view) + burn_lines(burn)
        print("\n".join(_table(view) + more + leads))
    return 0


async def _leader_lines(settings: DaemonSettings) -> list[str]:
    """Who leads a shared store (`store_lines`) and each site's scheduler command rate
    (`pace_lines`); nothing when no daemon answers."""
    async with DaemonClient(settings) as client:
        try:
            health = await client.health()
            return store_lines(health) + pace_lines(health)
        except DaemonUnavailable:
            return []


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    d = sub.add_parser("daemon", help="run the control daemon (collector, REST on a Unix socket)")
    d.add_argument(
        "action",
        nargs="?",
        choices=["run", "stop", "restart", "status"],
        default="run",
        help="run (default, in the foreground), stop, or restart (detached) the daemon; "
        "status: whether it runs, and the newest errors its loops logged",
    )
    d.add_argument("--json", action="store_true", help="status: the daemon's health as JSON")
    d.add_argument("--once", action="store_true", help="run one control cycle and exit")
    d.add_argument("--refresh", type=float, default=None, help="seconds between refreshes")
    d.set_defaults(func=_daemon)
    s = sub.add_parser(
        "status",
        help="the federation: sites, partitions, free GPUs, queues",
        description=(
            "The federation as the daemon sees it: sites, partitions, free GPUs, queues, "
            "each wait estimator's recent error, and the wait placement predicts now for "
            "1 GPU, 1 node and 4 GPUs per partition. Without a running daemon it reads the "
            "daemon's store directly (the last stored probes, neither table)."
        ),
    )
    s.add_argument(
        "--json",
        action="store_true",
        help="the FederationView as JSON, with `estimators` (each estimator's recent error) "
        "and `outlook` (the wait predicted now)",
    )
    s.add_argument("--site", action="append", default=[], help="only this site (repeatable)")
    s.add_argument("--accelerator", default=None, help="only partitions with this accelerator")
    s.add_argument("--arch", default=None, choices=["x86_64", "aarch64"])
    s.add_argument("--all", action="store_true", help="include blocked partitions")
    s.add_argument("--refresh", action="store_true", help="ask the daemon to probe now")
    s.add_argument("--watch", action="store_true", help="a live table until Ctrl-C")
    s.add_argument("--interval", type=float, default=2.0, help="seconds between --watch updates")
    s.add_argument("--no-color", action="store_true", help="no colour (also: NO_COLOR=1)")
    s.set_defaults(func=_status)
