"""The preloaded `fedhpc serve` host for Codex resumes (`fedhpc.cli.preload`): started by the
bridge before the first Codex resume and reused by every later one, ended with the bridge.
Codex 0.171 takes no per-resume URL for a stdio server, so the warm HTTP server Claude's
resumes use cannot serve it; instead the `fedhpc` first on the resume's PATH hands its stdio
to this host, which forks an already-imported server. When the host cannot start, or has
died, resumes start their own `fedhpc serve` as before: nothing but the wait changes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import structlog

from fedhpc.bridge.warm import alive, signal_all, spawn_detached
from fedhpc.settings import HOME

__all__ = ["RECORD", "ServeHost"]

log = structlog.get_logger(__name__)

RECORD = "serve-host.json"  # fedhpc.cli.relay.RECORD (the relay reads it; cli is above us)
_UP_S = 30.0


def _answers(path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.settimeout(0.5)
        return s.connect_ex(path) == 0


class ServeHost:
    """The bridge's preload host; `ensure()` before a Codex resume, `stop()` at the end."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.record = home / RECORD

    def _found(self) -> dict[str, object] | None:
        """The recorded host while its process lives and its socket answers."""
        try:
            found = json.loads(self.record.read_text())
            pid, path = int(found["pid"]), str(found["socket"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if alive(pid) and _answers(path):
            return {"pid": pid, "socket": path}
        return None

    async def ensure(self) -> bool:
        """True when a host answers (started now if needed); False when resumes must start
        their own server (logged once per failed start)."""
        if self._found() is not None:
            return True
        await self.stop()  # a recorded host that lives but does not answer: never two
        argv = [sys.executable, "-m", "fedhpc.cli.preload", "--record", str(self.record)]
        log_path = self.home / "serve-host.log"
        try:
            with anyio.CancelScope(shield=True):
                pid = await anyio.to_thread.run_sync(
                    lambda: spawn_detached(
                        argv, env=_host_env(self.home), cwd=str(self.home), log_path=log_path
                    )
                )
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("no preloaded serve host; resumes start their own", error=str(exc))
            return False
        with anyio.move_on_after(_UP_S):
            while self._found() is None:
                if not alive(pid):
                    break  # it exited at start: its log says why
                await anyio.sleep(0.05)
        if self._found() is None:
            log.warning("preloaded serve host did not come up", pid=pid, log=str(log_path))
            signal_all(pid, signal.SIGKILL)
            return False
        log.info("preloaded serve host up", pid=pid)
        return True

    async def stop(self) -> None:
        """End the recorded host (SIGTERM, then SIGKILL after 3 s) and forget it."""
        with anyio.CancelScope(shield=True):
            try:
                pid = int(json.loads(self.record.read_text())["pid"])
            except (OSError, ValueError, KeyError, TypeError):
                pid = 0
            argv = _cmdline(pid) if pid > 0 else []
            if pid > 0 and alive(pid) and b"fedhpc.cli.preload" in argv:
                signal_all(pid, signal.SIGTERM)
                for i in range(80):
                    if not alive(pid):
                        break
                    if i == 60:
                        signal_all(pid, signal.SIGKILL)
                    await anyio.sleep(0.05)
            self.record.unlink(missing_ok=True)


def _cmdline(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []


def _host_env(home: Path) -> dict[str, str]:
    """The host's own environment (each child gets its relay's): enough to import fedhpc."""
    env = {k: os.environ[k] for k in ("HOME", "USER", "LANG", "PATH") if k in os.environ}
    return env | {HOME.name: str(home)}
