"""`fedhpc tasks`, `task ID`, `events [--follow]`, `cancel ID`: the daemon's REST API for people."""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import anyio

from fedhpc.cli.pictures import poll_interval, task_timeline
from fedhpc.cli.table import table_lines
from fedhpc.client.daemon_client import DaemonClient
from fedhpc.ops.task_views import ResultManifest, TaskHandle, TaskSummary
from fedhpc.ops.tasks import CancelRequest, ResultRequest
from fedhpc.settings.daemon import DaemonSettings
from fedhpc.terminal import for_terminal

__all__ = ["add_parser"]

R = TypeVar("R")


def _with_client(op: Callable[[DaemonClient], Awaitable[R]]) -> R:
    async def run() -> R:
        async with DaemonClient(DaemonSettings.from_env()) as client:
            return await op(client)

    return anyio.run(run)


def _when(at: datetime | None) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if at else "-"


def _tasks(args: argparse.Namespace) -> int:
    rows = _with_client(lambda c: c.tasks(state=args.state, limit=args.limit))
    if args.json:
        print(json.dumps([t.model_dump(mode="json") for t in rows], indent=2))
        return 0
    print(_task_table(rows))
    return 0


def _task_table(rows: Sequence[TaskSummary]) -> str:
    head = ("TASK", "NAME", "STATE", "SITE", "PARTITION", "JOB", "TRIES", "GROUP", "UPDATED")
    body = [
        (
            t.task_id,
            t.name or "-",
            t.state.value,
            t.site or "-",
            t.partition or "-",
            t.job_id or "-",
            str(t.attempts),
            t.group_id or "-",
            _when(t.updated_at),
        )
        for t in rows
    ]
    return "\n".join(table_lines([head, *body])) if body else "no tasks"


def _task(args: argparse.Namespace) -> int:
    if args.timeline and not args.json:
        return task_timeline(args)
    req = ResultRequest(task_id=args.task_id, preview=args.preview, max_bytes=args.max_bytes)
    manifest = _with_client(lambda c: c.get_result(req))
    if args.json:
        print(manifest.model_dump_json(indent=2))
        return 0
    print(_manifest_text(manifest))
    return 0


def _manifest_text(m: ResultManifest) -> str:
    """The manifest for a person; what an agent, a site or the job wrote (reasons, decision,
    output tails) is shown with its control characters escaped (`fedhpc.terminal`)."""
    t = for_terminal
    lines = [f"task {m.task_id}" + (f" ({t(m.name)})" if m.name else "") + f": {m.state.value}"]
    if m.group_id:
        lines.append(f"group {m.group_id}")
    if m.provenance:
        lines.append(f"placement: {t(m.provenance.decision)}")
    lines.extend(f"reason: {t(r)}" for r in m.reasons)
    if m.waiting:
        lines.append(t(m.waiting))  # why it has not started, and when it may
    if m.attempts:
        head = ("#", "SITE", "PARTITION", "JOB", "STATE", "WAIT", "RUNTIME", "EXIT")
        body = [
            (
                str(a.n) + ("*" if a.superseded else ""),
                a.site,
                a.partition,
                a.job_id or "-",
                a.state.value,
                f"{a.wait_s:.0f}s" if a.wait_s is not None else "-",
                f"{a.runtime_s:.0f}s" if a.runtime_s is not None else "-",
                str(a.exit_code) if a.exit_code is not None else "-",
            )
            for a in m.attempts
        ]
        lines += ["", *table_lines([head, *body])]
    if m.outputs:
        outputs = [(o.kind, o.site or "-", o.path) for o in m.outputs]
        lines += ["", *table_lines([("OUTPUT", "SITE", "PATH"), *outputs])]
    if m.preview is not None:
        lines += ["", ("[...]\n" if m.truncated else "") + t(m.preview, lines=True)]
    if m.stderr is not None:
        lines += ["", "stderr (tail):", t(m.stderr, lines=True)]
    if m.next:
        lines += ["", t(m.next)]
    return "\n".join(lines)


PAYLOAD_WIDTH = 100  # an event line's payload: whole `key=value` pairs up to this width


def _payload(payload: dict[str, Any], width: int = PAYLOAD_WIDTH) -> str:
    """The payload as `key=value` pairs, whole pairs only, up to `width` characters; what did not
    fit is counted (`--json` prints it all). A first value longer than the width is cut with
    `…` inside the value (keys are short)."""
    pairs = [
        f"{k}={v if isinstance(v, str) else json.dumps(v, separators=(',', ':'))}"
        for k, v in payload.items()
    ]
    shown = ""
    for i, pair in enumerate(pairs):
        joined = f"{shown} {pair}" if shown else pair
        if len(joined) <= width:
            shown = joined
            continue
        cut = not shown  # one long first value: cut inside it, never inside its key
        if cut:
            shown = pair[: width - 1] + "…"
        left = len(pairs) - i - cut
        return shown + (f"  (+{left} more: --json)" if left else "")
    return shown


def _event_line(e: dict[str, Any]) -> str:
    kind, subject = for_terminal(str(e["kind"])), for_terminal(str(e["subject"]))
    payload = for_terminal(_payload(e.get("payload") or {}))
    return f"{e['seq']:>6}  {e['created_at'][:19]}  {kind:<20}  {subject:<16}  {payload}"


async def _follow(args: argparse.Namespace) -> None:
    after = args.after
    async with DaemonClient(DaemonSettings.from_env()) as client:
        while True:
            rows = await client.events(after=after, limit=args.limit)
            for e in rows:
                print(json.dumps(e) if args.json else _event_line(e), flush=True)
                after = max(after, int(e["seq"]))
            if not args.follow:
                return
            if not rows:
                await anyio.sleep(poll_interval(args.interval))


def _events(args: argparse.Namespace) -> int:
    if args.follow:
        poll_interval(args.interval)
    if not args.json and not args.follow:
        rows = _with_client(lambda c: c.events(after=args.after, limit=args.limit))
        print("\n".join(_event_line(e) for e in rows) if rows else "no events")
        return 0
    if args.json and not args.follow:
        rows = _with_client(lambda c: c.events(after=args.after, limit=args.limit))
        print(json.dumps(rows, indent=2))
        return 0
    anyio.run(_follow, args)  # --follow: one line per event (JSON lines with --json)
    return 0


def _archive(args: argparse.Namespace) -> int:
    out = _with_client(lambda c: c.archive_events(args.older_than_days, dry_run=args.dry_run))
    if args.json:
        print(json.dumps(out, indent=2))
    elif args.dry_run:
        print(
            f"{out['archived']} events older than {out['before'][:19]} would move to the "
            f"archive; {out['remaining']} in the store"
        )
    else:
        where = f" to {out['archive']}" if out["archive"] else ""
        print(f"archived {out['archived']} events{where}; {out['remaining']} in the store")
    return 0


def _cancel(args: argparse.Namespace) -> int:
    handle: TaskHandle = _with_client(lambda c: c.cancel(CancelRequest(task_id=args.task_id)))
    if args.json:
        print(handle.model_dump_json(indent=2))
    else:
        print(f"task {for_terminal(handle.task_id)}: {handle.state.value}")
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    t = sub.add_parser("tasks", help="recent tasks, newest first")
    t.add_argument("--state", default=None, help="only tasks in this state")
    t.add_argument("--limit", type=int, default=50)
    t.add_argument("--json", action="store_true", help="as JSON")
    t.set_defaults(func=_tasks)

    one = sub.add_parser("task", help="one task: attempts, placement, outputs")
    one.add_argument("task_id", metavar="ID")
    one.add_argument("--preview", choices=["stdout", "stderr", "none"], default=None)
    one.add_argument("--max-bytes", type=int, default=2048)
    one.add_argument("--json", action="store_true", help="the result manifest as JSON")
    one.add_argument("--timeline", action="store_true", help="its attempts on a time axis")
    one.add_argument("--no-color", action="store_true", help="no colour (also: NO_COLOR=1)")
    one.set_defaults(func=_task)

    ev = sub.add_parser("events", help="the event log (task ended, site offline, ...)")
    ev.add_argument("--after", type=int, default=0, help="start after this seq")
    ev.add_argument("--limit", type=int, default=100)
    ev.add_argument("--follow", "-f", action="store_true", help="keep printing new events")
    ev.add_argument("--interval", type=float, default=2.0, help="seconds between polls")
    ev.add_argument("--json", action="store_true", help="as JSON (JSON lines with --follow)")
    ev.set_defaults(func=_events)

    ar = sub.add_parser(
        "archive-events",
        help="move delivered events older than N days out of the store into <home>/archive",
    )
    ar.add_argument("--older-than-days", type=float, default=30.0, metavar="N")
    ar.add_argument("--dry-run", action="store_true", help="only count them")
    ar.add_argument("--json", action="store_true", help="as JSON")
    ar.set_defaults(func=_archive)

    c = sub.add_parser(
        "cancel", help="cancel a task (kills its job), or a group's every live child by its id"
    )
    c.add_argument("task_id", metavar="ID")
    c.add_argument("--json", action="store_true", help="the task handle as JSON")
    c.set_defaults(func=_cancel)
