"""Process plumbing: start a job's wrapper fully detached, tell whether it still lives, and
signal a job's process group."""

from __future__ import annotations

import os
import signal
import sys
from contextlib import suppress
from pathlib import Path

__all__ = ["alive", "signal_group", "signal_pid", "spawn_detached", "start_ticks"]


def spawn_detached(argv: list[str], log: Path) -> int:
    """Run `python argv...` in a new session, reparented to init (double fork), with stdin
    from /dev/null and stdout/stderr appended to `log`; return its pid.

    Detached so the caller (a transport waiting for our stdout to close) never waits for a
    job, and so no zombie is left to a long-lived caller."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the intermediate child
        code = 0
        try:
            os.close(read_end)
            os.setsid()
            grandchild = os.fork()
            if grandchild == 0:
                code = 127
                os.close(write_end)
                null = os.open(os.devnull, os.O_RDONLY)
                out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                os.dup2(null, 0)
                os.dup2(out, 1)
                os.dup2(out, 2)
                os.execv(sys.executable, [sys.executable, *argv])  # noqa: S606 (argv, no shell)
            os.write(write_end, str(grandchild).encode())
        finally:
            os._exit(code)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 64):
        chunks.append(chunk)
    os.close(read_end)
    os.waitpid(pid, 0)
    return int(b"".join(chunks))


def start_ticks(pid: int) -> str | None:
    """The process's start time in clock ticks (/proc/PID/stat field 22), None when it is gone
    or a zombie: with the pid it identifies a process even after the pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    if not fields or fields[0] in {"Z", "X"}:
        return None
    return fields[19]


def alive(pid: int | None, ticks: str | None) -> bool:
    if pid is None:
        return False
    now = start_ticks(pid)
    return now is not None and (ticks is None or now == ticks)


def signal_pid(pid: int | None, sig: signal.Signals) -> None:
    if pid is not None and pid > 1:
        with suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def signal_group(pgid: int | None, sig: signal.Signals) -> None:
    if pgid is not None and pgid > 1:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
