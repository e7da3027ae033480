"""Terminal pictures (CLI only, never the daemon): attempts on a time axis and the federation
as a table, drawn with rich. Colour only where the terminal supports it; `NO_COLOR` or
`--no-color` turn it off (rich also drops it on a pipe)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import IO

from rich.console import Console, Group
from rich.progress import Progress
from rich.table import Table
from rich.text import Text

from fedhpc.ops.inspect import FEDERATION_COLUMNS, FederationView, federation_rows
from fedhpc.settings.others import NO_COLOR
from fedhpc.terminal import for_terminal
from fedhpc.ui.timeline import Bar, span, why

__all__ = ["axis_width", "console", "federation_table", "steps", "timeline_table", "waiting"]

# A site's colour never says a state: no red (failed, offline), yellow (running, busy) or
# green (completed, free GPUs) among them.
SITE_STYLES = ("blue", "magenta", "cyan", "bright_blue", "bright_magenta", "bright_cyan", "white")
STATE_STYLES = {
    "completed": "green",
    "failed": "red",
    "timeout": "red",
    "running": "yellow",
    "cancelled": "dim",
    "unschedulable": "red",
}
HEALTH_STYLES = {"ok": "green", "degraded": "yellow", "offline": "red", "unknown": "red"}
CAUSE_MARKS = {
    "placed": "",
    "re-placed": "re-placed",
    "replanned": "replanned",
    "retry": "retry",
    "extension": "longer wall",
    "hedged": "hedged",
}


def console(no_color: bool = False, file: IO[str] | None = None) -> Console:
    """A console for stdout: colour when the terminal has it, never with --no-color/NO_COLOR."""
    off = no_color or bool(NO_COLOR.read())
    return Console(file=file or sys.stdout, no_color=off or None, highlight=False, soft_wrap=False)


def _axis(b: Bar, t0: datetime, t1: datetime, width: int, now: datetime) -> Text:
    """One attempt as cells: '·' waiting in the queue, '█' running, '✕' where it was moved."""
    total = max((t1 - t0).total_seconds(), 1e-9)

    def col(t: datetime) -> int:
        return min(width - 1, max(0, int((t - t0).total_seconds() / total * (width - 1))))

    a = col(b.submitted or b.started or t0)
    z = col(b.ended or now)
    r = col(b.started) if b.started else z + 1
    text = Text(" " * a)
    text.append("·" * max(0, min(r, z + 1) - a), style="dim")
    if b.started:
        text.append("█" * max(0, z + 1 - r), style=STATE_STYLES.get(b.state.value, ""))
    if b.superseded and len(text) > a:
        text.right_crop(1)
        text.append("✕", style="bold")  # moved, not failed: no red
    text.append(" " * max(0, width - len(text)))
    return text


def timeline_table(
    items: Sequence[Bar], *, title: str, width: int = 40, now: datetime | None = None
) -> Group | Text:
    """Every attempt on one time axis, grouped by site, with how it came to be; then one
    line per attempt saying why (the placement's reason)."""
    now = now or datetime.now(UTC)
    axis = span(items, now)
    if axis is None:
        return Text(f"{for_terminal(title)}: no attempt has been submitted yet")
    t0, t1 = axis
    secs = f"{(t1 - t0).total_seconds():.0f}s"
    heading = Text(for_terminal(title))
    table = Table(title=heading, title_justify="left", box=None, pad_edge=False, expand=False)
    for head in ("SITE", "ATTEMPT", "STATE"):
        table.add_column(head, no_wrap=True)
    table.add_column(f"0s{' ' * max(1, width - 2 - len(secs))}{secs}", no_wrap=True)
    table.add_column("HOW", no_wrap=True)
    notes = Text()
    sites = sorted({b.site for b in items})
    colours = {s: SITE_STYLES[i % len(SITE_STYLES)] for i, s in enumerate(sites)}
    for site in sites:
        for b in (x for x in items if x.site == site):
            state = Text(b.state.value, style=STATE_STYLES.get(b.state.value, ""))
            how = CAUSE_MARKS[b.cause]
            if b.superseded:
                gone = "cancelled ✕" if b.outrun_by is not None else "moved ✕"
                how = ", ".join(x for x in (how, gone) if x)
            label = for_terminal(b.label)  # a Text, not a str: rich reads no markup in it
            table.add_row(
                Text(for_terminal(site), style=colours[site]),
                Text(label),
                state,
                _axis(b, t0, t1, width, now),
                Text(how, style="bold"),
            )
            notes.append(f"  {label}: ", style="bold")
            notes.append(for_terminal(why(b)) + "\n")  # reasons quote what sites and agents wrote
    legend = Text("  · waiting in a queue   █ running   ✕ moved elsewhere\n", style="dim")
    return Group(table, legend, notes)


def axis_width(out: Console) -> int:
    """A time axis that fits the console beside the other columns (20 to 60 cells)."""
    return max(20, min(60, out.width - 60))


def federation_table(view: FederationView) -> Table:
    """`fedhpc status` as a table: one row per partition, the site's health and freshness
    (the same cells as the plain table, `federation_rows`; a site named once, in colour)."""
    title = f"federation at {view.taken_at:%H:%M:%S} UTC"
    table = Table(box=None, pad_edge=False, header_style="bold", title=title, title_justify="left")
    for head in FEDERATION_COLUMNS:
        right = head.startswith(("GPUS", "CPUS", "PENDING", "RUNNING"))
        table.add_column(head, justify="right" if right else "left")
    previous = None
    for s, cells in federation_rows(view):
        first = s.site != previous
        previous = s.site
        p = next((x for x in s.partitions if x.name == cells[1]), None)
        # Every GPU taken is busy, not broken: yellow; red is kept for an offline site.
        tone = (
            "dim"
            if p is None
            else ("green" if p.free_gpus else ("yellow" if p.total_gpus else "dim"))
        )
        health = Text(cells[-1], style=HEALTH_STYLES.get(s.health.value, ""))
        table.add_row(
            cells[0] if first else "",
            *cells[1:4],
            Text(cells[4], style=tone),
            *cells[5:8],
            cells[8] if first else "",
            health if first else "",
        )
    return table


def _progress(*, counted: bool = True) -> Progress:
    """A spinner, the text and the time elapsed; with `counted`, a bar and "done/total"."""
    # startup: rich's progress bars only when steps are shown
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    counts = (BarColumn(), MofNCompleteColumn()) if counted else ()
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        *counts,
        TimeElapsedColumn(),
        console=console(),
        transient=False,
    )


@contextmanager
def steps(what: str, names: Sequence[str]) -> Iterator[Callable[[str], None]]:
    """A progress bar over known steps: call the yielded function with each step's name as it
    begins; the bar fills as steps are done."""
    with _progress() as bar:
        task = bar.add_task(what, total=len(names))
        seen: list[str] = []

        def begin(name: str) -> None:
            if seen:
                bar.advance(task)
            seen.append(name)
            bar.update(task, description=f"{what}: {name}")

        yield begin
        bar.update(task, completed=len(names), description=f"{what}: done")


@contextmanager
def waiting(what: str) -> Iterator[Callable[[str], None]]:
    """A spinner with the time elapsed for a wait of unknown length; the yielded function
    changes its text."""
    with _progress(counted=False) as bar:
        task = bar.add_task(what, total=None)
        yield lambda text: bar.update(task, description=text)
