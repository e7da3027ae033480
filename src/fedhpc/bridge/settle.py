"""How a started resume stands, read from its folder and its process group: still running
(or still launching, or a process of its group still lives), never launched, ended with a
status, or failed without one. A resume that got no model answer within the start timeout is
stopped here, its whole group: SIGTERM, then SIGKILL after a grace."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import structlog

from fedhpc.bridge.group import (
    KILL_GRACE_S,
    end_group,
    group_alive,
    process_alive,
    settle_group,
)
from fedhpc.bridge.outcome import Outcome, collect, model_answered, tail_of, why_silent
from fedhpc.ops.continuations import ContinuationSpec

__all__ = ["LAUNCH_S", "Stand", "Standing", "standing"]

log = structlog.get_logger(__name__)

LAUNCH_S = 60.0  # a launch's shell has recorded the pid by then (it times out at 30 s)


class Stand(Enum):
    RUNNING = "running"  # its process lives, or its launch may still record the pid
    UNLAUNCHED = "unlaunched"  # crashed before launch: nothing reached the session
    ENDED = "ended"  # it wrote its status: `outcome`
    FAILED = "failed"  # it ended without a status, or its launch was interrupted: `reason`


@dataclass(frozen=True, slots=True)
class Standing:
    stand: Stand
    outcome: Outcome | None = None
    reason: str = ""


def _pid(pid_file: Path) -> int:
    try:
        return int(pid_file.read_text().strip() or "0")
    except (OSError, ValueError):
        return 0


def standing(
    spec: ContinuationSpec,
    folder: Path,
    *,
    now: float,
    start_timeout_s: float,
    grace_s: float = KILL_GRACE_S,
) -> Standing:
    """Where the resume in `folder` stands at `now` (epoch seconds). It runs while any process
    of its group lives, also after its wrapper wrote the status: a next try never starts
    beside a survivor of this one. Blocking file reads: run it off the event loop."""
    done = collect(folder)
    pid_file = folder / "pid"
    stopped = folder / "stopped"
    pid = _pid(pid_file)
    if pid and group_alive(pid) and (done is None or settle_group(pid)):
        if done is None and not stopped.exists():
            age = now - pid_file.stat().st_mtime
            if age > start_timeout_s and not model_answered(spec, folder):
                log.warning("resume got no model answer; stopping it", resume=folder.name)
                stopped.write_text(
                    f"no answer from the model within {start_timeout_s:g} s{why_silent(folder)}"
                )
        if done is not None or stopped.exists():  # stragglers, or a stopped resume
            end_group(pid, folder, now=now, grace_s=grace_s)
        return Standing(Stand.RUNNING)
    # It may have written its status and ended between the two looks: read it again.
    done = done or collect(folder)
    young = pid_file.exists() and now - pid_file.stat().st_mtime < LAUNCH_S
    if done is None and pid and young and process_alive(pid):
        return Standing(Stand.RUNNING)  # launched, not yet the leader of its own session
    if done is not None and not stopped.exists():  # a stopped one failed, whatever its status
        return Standing(Stand.ENDED, outcome=done)
    if not folder.exists():
        return Standing(Stand.UNLAUNCHED)
    # Crashed while launching: it may run (its shell writes the pid), so wait; past the
    # launch timeout it is a failed attempt, and the retry checks the session record
    # before re-sending anything (never a second resume with the same events).
    if not pid_file.exists() and now - folder.stat().st_mtime < LAUNCH_S:
        return Standing(Stand.RUNNING)
    tails = Outcome(-1, tail_of(folder / "out"), tail_of(folder / "err")).reason()
    reason = (
        stopped.read_text()
        if stopped.exists()
        else (
            "the resume ended without a status"
            if pid_file.exists()
            else "the resume's launch was interrupted (no pid recorded)"
        )
    )
    return Standing(Stand.FAILED, reason=f"{reason}; {tails}")
