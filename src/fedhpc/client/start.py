"""Starting the daemon as a detached process of its own."""

from __future__ import annotations

import os
import subprocess
import sys

from fedhpc.errors import UsageError
from fedhpc.settings import HOME
from fedhpc.settings.daemon import DaemonSettings

__all__ = ["start_daemon"]


def start_daemon(settings: DaemonSettings) -> int:
    """Start the daemon detached (own session, output to the daemon log); its pid. As
    `python -m fedhpc.daemon`, what `fedhpc daemon` re-executes as: not through the CLI,
    whose parser and imports cost as much CPU again as the daemon's own start."""
    settings.home.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not os.access(settings.home, os.W_OK):
        raise UsageError(f"{settings.home} is not writable")
    with settings.log_path.open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fedhpc.daemon"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            env={**os.environ, HOME.name: str(settings.home)},
        )
    return proc.pid
