"""Daemon bookkeeping for devfed: pid files, liveness, bounded waits, stop and sweep."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from pathlib import Path

import structlog
from tenacity import Retrying, retry_if_result, stop_after_delay, wait_fixed

from fedhpc_dev.devfed import DevfedError

__all__ = [
    "DAEMONS",
    "alive_pid",
    "port_open",
    "run",
    "stop_pids",
    "sweep",
    "wait_for",
]

log = structlog.get_logger(__name__)

# Process names (/proc/PID/comm) that belong to a federation; slurmstepd and slurmscriptd are
# children of slurmd and slurmctld that can outlive them when killed.
DAEMONS = ("slurmd", "slurmctld", "slurmdbd", "munged", "mariadbd", "slurmstepd", "slurmscriptd")


def run(
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    stdin: str | None = None,
    timeout_s: float = 60,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run argv (never a shell string); raise DevfedError with its stderr when `check` fails."""
    full_env = {**os.environ, **(env or {})}
    try:
        proc = subprocess.run(
            list(argv),
            env=full_env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise DevfedError(f"{argv[0]} did not finish within {timeout_s:.0f}s") from exc
    except FileNotFoundError as exc:
        raise DevfedError(f"{argv[0]} is not installed") from exc
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise DevfedError(
            f"{' '.join(argv[:3])} failed: {detail[-1] if detail else proc.returncode}"
        )
    return proc


def _comm(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def alive_pid(pid_file: Path, comm: str) -> int | None:
    """The pid in `pid_file` if that process runs and is named `comm` (guards pid reuse)."""
    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if _comm(pid) == comm else None


def port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_for(check: Callable[[], bool], what: str, timeout_s: float, step_s: float = 0.25) -> None:
    """Poll `check` until it is true; DevfedError naming `what` once `timeout_s` passes."""
    retry = Retrying(
        stop=stop_after_delay(timeout_s),
        wait=wait_fixed(step_s),
        retry=retry_if_result(lambda ok: ok is not True),
        retry_error_callback=lambda _state: False,
    )
    if retry(check) is not True:
        raise DevfedError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def _gone(pids: Sequence[int]) -> bool:
    return all(_comm(p) is None or _is_zombie(p) for p in pids)


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"


def stop_pids(pids: Sequence[int], grace_s: float = 15) -> None:
    """SIGTERM, wait up to `grace_s`, then SIGKILL whatever is left and wait for it to go."""
    if not pids:
        return
    for pid in pids:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    with suppress(DevfedError):
        wait_for(lambda: _gone(pids), "daemons to exit", grace_s)
        return
    left = [p for p in pids if not _gone([p])]
    log.warning("devfed.kill", pids=left)
    for pid in left:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_for(lambda: _gone(pids), f"pids {left} to die after SIGKILL", 5)


def _references(pid: int, root: bytes) -> bool:
    # slurmdbd takes no config path argument, so its SLURM_CONF (environ) names the folder.
    for name in ("cmdline", "environ"):
        with suppress(OSError):
            if root in Path(f"/proc/{pid}/{name}").read_bytes():
                return True
    return False


def sweep(root: Path) -> list[int]:
    """Pids of devfed daemons still running: named in DAEMONS and referencing `root`."""
    needle = (str(root).rstrip("/") + "/").encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        mine = pid != os.getpid() and _comm(pid) in DAEMONS and _references(pid, needle)
        if mine and not _is_zombie(pid):
            found.append(pid)
    return sorted(found)
