"""A resume's process group: every process a resume starts lives in the group its wrapper
leads (`setsid`), and fedhpc ends it as a whole: SIGTERM to the group, SIGKILL to the group
after a grace, and the resume counts as ended only once no process of the group lives."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

__all__ = [
    "KILL_GRACE_S",
    "end_group",
    "group_alive",
    "group_members",
    "process_alive",
    "settle_group",
]

KILL_GRACE_S = 5.0  # SIGTERM, then SIGKILL of the whole group this long after
_TERM = "term"  # the file, in the resume's folder, whose mtime says when SIGTERM was sent


def group_members(pgid: int, proc: Path = Path("/proc")) -> list[int]:
    """The live (not zombie) processes of group `pgid`. A zombie is dead already: its parent,
    or init, reaps it; it holds no resources and makes no model request."""
    if pgid <= 0:
        return []
    try:  # the cheap look first: no process of the group at all
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []
    except PermissionError:
        pass  # a member we may not signal: still read /proc
    found: list[int] = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # ended meanwhile
            continue
        # `pid (comm) state ppid pgrp ...`: comm may hold spaces and parentheses
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[0] != "Z" and fields[2] == str(pgid):
            found.append(int(entry.name))
    return found


def group_alive(pgid: int) -> bool:
    return bool(group_members(pgid))


def process_alive(pid: int, proc: Path = Path("/proc")) -> bool:
    """Whether process `pid` lives (not a zombie), whatever its group: a wrapper that has not
    yet made its own session (`setsid` forked, not yet run) leads no group so far."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return False
    fields = stat[stat.rfind(")") + 2 :].split()
    return bool(fields) and fields[0] != "Z"


def _signal(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def end_group(pgid: int, folder: Path, *, now: float, grace_s: float = KILL_GRACE_S) -> None:
    """One step of ending the group, at each look while any member lives (never blocks):
    SIGTERM the first time (when, recorded in `folder`), SIGKILL once `grace_s` has passed
    since (a CLI may ignore SIGTERM, and the children it forks inherit that)."""
    term = folder / _TERM
    try:
        sent = float(term.read_text().strip())
    except (OSError, ValueError):
        term.write_text(f"{now:.3f}\n")
        _signal(pgid, signal.SIGTERM)
        return
    if now - sent >= grace_s:
        _signal(pgid, signal.SIGKILL)


def settle_group(pgid: int, wait_s: float = 0.5) -> bool:
    """After the wrapper wrote its status: whether members remain once the wrapper itself
    has had `wait_s` to exit (it writes the status as its last act). Blocking."""
    end = time.monotonic() + wait_s
    while group_alive(pgid):
        if time.monotonic() >= end:
            return True
        time.sleep(0.02)
    return False
