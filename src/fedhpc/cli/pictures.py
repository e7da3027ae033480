"""Terminal pictures for people: `fedhpc task ID --timeline`, `fedhpc group ID [--timeline]`,
`fedhpc status --watch`. CLI only (rich is never imported by the daemon)."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import signal
from datetime import UTC, datetime

import anyio

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.client.errors import DaemonUnavailable
from fedhpc.errors import UsageError
from fedhpc.ops.inspect import InspectRequest
from fedhpc.settings.daemon import DaemonSettings
from fedhpc.terminal import for_terminal
from fedhpc.ui.data import MAX_CHILDREN, group_manifests, manifest
from fedhpc.ui.timeline import bar_json, bars

__all__ = ["MIN_INTERVAL_S", "add_parser", "poll_interval", "task_timeline", "watch_status"]

MIN_INTERVAL_S = 0.1  # a poll more often than this only loads the daemon


def poll_interval(seconds: float, flag: str = "--interval") -> float:
    """`seconds` between polls, refused as a usage error unless finite and at least
    MIN_INTERVAL_S (a negative sleep raised from anyio; 0 polled the daemon in a busy loop)."""
    if not (math.isfinite(seconds) and seconds >= MIN_INTERVAL_S):
        raise UsageError(
            f"{flag} {seconds:g} is not a wait between updates",
            hint=f"Give the seconds between updates: at least {MIN_INTERVAL_S:g} (default 2).",
        )
    return seconds


def task_timeline(args: argparse.Namespace) -> int:
    """One task's attempts on a time axis."""
    # startup: rich's terminal pictures only when one is drawn
    from fedhpc.ui.term import axis_width, console, timeline_table

    async def run() -> int:
        async with DaemonClient(DaemonSettings.from_env()) as client:
            m = await manifest(client, args.task_id)
        name = f" ({for_terminal(m.name)})" if m.name else ""
        title = f"task {m.task_id}{name}: {m.state.value}"
        out = console(args.no_color)
        out.print(timeline_table(bars([m]), title=title, width=axis_width(out)))
        return 0

    return anyio.run(run)


def _group(args: argparse.Namespace) -> int:
    # startup: rich's terminal pictures only when one is drawn
    from fedhpc.ui.term import axis_width, console, timeline_table

    async def run() -> int:
        async with DaemonClient(DaemonSettings.from_env()) as client:
            if not args.timeline:
                view = await client.group(args.group_id)
                if args.json:
                    print(view.model_dump_json(indent=2))
                    return 0
                counts = ", ".join(f"{k} {v}" for k, v in view.counts.items())
                # The objective is the agent's text: its escape sequences (a terminal title, a
                # clear screen) are shown, never sent to the terminal.
                print(
                    f"group {view.group_id}: {view.state}, round {view.round}, "
                    f"{view.size} children ({counts})\n{for_terminal(view.objective, lines=True)}"
                )
                for c in view.children:
                    where = f"{c.site}/{c.partition} job {c.job_id}" if c.site else "-"
                    print(f"  {c.task_id}  {c.state.value:<13} {for_terminal(where)}")
                if view.omitted:
                    print(f"  ... {view.omitted} more children")
                return 0
            group, found, omitted = await group_manifests(client, args.group_id)
        counts = ", ".join(f"{k} {v}" for k, v in group.counts.items())
        title = f"group {group.group_id}: {group.state}, round {group.round} ({counts})"
        items = bars(found)
        if args.json:
            print(
                json.dumps(
                    {
                        "group": group.model_dump(mode="json"),
                        "omitted": omitted,
                        "bars": [bar_json(b) for b in items],
                    },
                    indent=2,
                )
            )
            return 0
        out = console(args.no_color)
        out.print(timeline_table(items, title=title, width=axis_width(out)))
        if omitted:
            out.print(f"({omitted} children after the first {MAX_CHILDREN} are not drawn)")
        return 0

    return anyio.run(run)


def watch_status(settings: DaemonSettings, req: InspectRequest, args: argparse.Namespace) -> int:
    """A live table of the federation until Ctrl-C (the daemon's view, every --interval s)."""
    interval = poll_interval(args.interval)
    # startup: rich's terminal pictures only when one is drawn
    from rich.live import Live
    from rich.text import Text

    from fedhpc.ui.term import console, federation_table

    out = console(args.no_color)

    async def draw() -> None:
        async with DaemonClient(settings) as client:
            view = await client.federation(req)
            with Live(federation_table(view), console=out, auto_refresh=False) as live:
                while True:
                    await anyio.sleep(interval)
                    try:
                        view = await client.federation(req)
                    except DaemonUnavailable as exc:
                        now = datetime.now(UTC)
                        live.update(Text(f"{now:%H:%M:%S} {exc.message}; retrying"), refresh=True)
                        continue
                    live.update(federation_table(view), refresh=True)

    async def run() -> None:
        # Ctrl-C ends the watch: heard by the loop and turned into a cancellation, never a
        # KeyboardInterrupt raised wherever the main thread happens to be (inside the HTTP
        # client's cleanup one was swallowed, and the watch went on).
        async with anyio.create_task_group() as tg:
            tg.start_soon(draw)
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    tg.cancel_scope.cancel()
                    break

    with contextlib.suppress(KeyboardInterrupt):  # one that came before the loop listened
        anyio.run(run)
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    g = sub.add_parser("group", help="one group: round, children; --timeline draws the attempts")
    g.add_argument("group_id", metavar="ID")
    g.add_argument("--timeline", action="store_true", help="attempts per site on a time axis")
    g.add_argument("--json", action="store_true", help="as JSON")
    g.add_argument("--no-color", action="store_true", help="no colour (also: NO_COLOR=1)")
    g.set_defaults(func=_group)
