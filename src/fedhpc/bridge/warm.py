"""A warm MCP server for Claude resumes: one `fedhpc serve --http` on loopback, started by the
bridge and reused by every resume, so a resumed turn does not wait for a fresh `fedhpc serve`
to import the MCP SDK (~1.5 s, more on a loaded machine). It requires a bearer token (random,
in a 0600 file), answers only on 127.0.0.1, and outlives only a daemon crash (its record says
where it is); a clean stop, or a cancelled bridge, ends it. If it cannot be started, resumes
fall back to a stdio server."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import structlog

from fedhpc.settings import HOME, MCP_TOKEN

__all__ = ["DAEMON_WAIT_S", "WarmServer", "alive", "signal_all", "spawn_detached"]

log = structlog.get_logger(__name__)

DAEMON_WAIT_S = 30.0  # a resumed turn's call waits this long for a restarting daemon


def spawn_detached(argv: list[str], *, env: dict[str, str], cwd: str, log_path: Path) -> int:
    """Start `argv` in its own session, reparented away from us (no zombie to reap); its pid."""
    outer = 'setsid "$@" < /dev/null >> "$LOGFILE" 2>&1 & echo $!'
    done = subprocess.run(
        ["bash", "-c", outer, "fedhpc-spawn", *argv],
        cwd=cwd,
        env={**env, "LOGFILE": str(log_path)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    pid = int(done.stdout.strip() or "0")
    if done.returncode != 0 or pid <= 0:
        raise OSError(f"could not start {argv[0]}: {done.stderr.strip()[-200:]}")
    return pid


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(errors="replace")
    except OSError:
        return False
    return ") Z " not in stat


def signal_all(pid: int, sig: signal.Signals) -> None:
    """The server's process group, and the process itself (it may not lead a group)."""
    for send in (os.killpg, os.kill):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            send(pid, sig)


def _ours(found: dict[str, Any]) -> int:
    """The recorded server's pid while that process lives and is still our server (not a
    recycled pid), else 0: it is ended whether or not it answers."""
    pid, port = int(found.get("pid", 0)), str(found.get("port", ""))
    if pid <= 0 or not alive(pid):
        return 0
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return 0
    return pid if b"serve" in argv and port.encode() in argv else 0


def _answers(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


async def _wait_up(pid: int, port: int) -> None:
    with anyio.move_on_after(30):
        while not _answers(port):
            if not alive(pid):
                raise OSError("the resume MCP server exited at start (resume-mcp.log)")
            await anyio.sleep(0.1)
    if not _answers(port):
        raise OSError("the resume MCP server did not answer within 30 s")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class WarmServer:
    """The bridge's resume MCP server; `entry()` is the `mcpServers.fedhpc` config to use."""

    def __init__(self, home: Path, *, daemon_wait_s: float = DAEMON_WAIT_S) -> None:
        self.home = home
        self.record = home / "resume-mcp.json"
        self.daemon_wait_s = daemon_wait_s

    def _recorded(self) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = json.loads(self.record.read_text())
        except (OSError, ValueError):
            return None
        return found

    def _load(self) -> dict[str, Any] | None:
        found = self._recorded()
        if found is not None and _ours(found) and _answers(int(found.get("port", 0))):
            return found
        return None

    def _write(self, found: dict[str, Any]) -> None:
        tmp = self.record.with_suffix(".tmp")
        tmp.write_text(json.dumps(found))
        tmp.chmod(0o600)
        tmp.replace(self.record)

    async def _end(self) -> None:
        """End the recorded server if its process lives (answering or hung): its whole
        process group, SIGTERM then SIGKILL after 3 s; then forget it."""
        found = self._recorded()
        pid = _ours(found) if found is not None else 0
        if pid:
            signal_all(pid, signal.SIGTERM)
            for i in range(80):  # SIGKILL after 3 s, then up to 1 s for it to go
                if not alive(pid):
                    break
                if i == 60:
                    signal_all(pid, signal.SIGKILL)
                await anyio.sleep(0.05)
            log.info("resume mcp server stopped", pid=pid)
        self.record.unlink(missing_ok=True)

    async def _start(self) -> dict[str, Any]:
        token = secrets.token_urlsafe(32)
        port = _free_port()
        env = {k: os.environ[k] for k in ("HOME", "USER", "LANG", "PATH") if k in os.environ}
        env |= {HOME.name: str(self.home), MCP_TOKEN.name: token}
        argv = [
            sys.executable,
            "-m",
            "fedhpc.cli.main",
            "serve",
            "--http",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-autostart",  # a daemon it outlives is never restarted by it, but a
            "--daemon-wait",  # daemon restarting (crash, `daemon restart`) is waited for
            f"{self.daemon_wait_s:g}",
        ]
        log_path = self.home / "resume-mcp.log"
        # Off the loop (a fork and a shell: tens of ms on a busy machine), and shielded with
        # the record: a bridge cancelled while it starts still finds the server to end.
        with anyio.CancelScope(shield=True):
            pid = await anyio.to_thread.run_sync(
                lambda: spawn_detached(argv, env=env, cwd=str(self.home), log_path=log_path)
            )
            found = {"pid": pid, "port": port, "token": token}
            self._write(found)
        try:
            await _wait_up(pid, port)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._end()
            raise
        log.info("resume mcp server up", pid=pid, port=port)
        return found

    async def entry(self) -> dict[str, Any] | None:
        """The HTTP server entry (started when needed), or None when it cannot run."""
        found = self._load()
        if found is None:
            await self._end()  # a recorded server that lives but does not answer: never two
            try:
                found = await self._start()
            except (OSError, subprocess.SubprocessError) as exc:
                log.warning("no warm resume MCP server; resumes start their own", error=str(exc))
                return None
        auth = {"Authorization": f"Bearer {found['token']}"}
        url = f"http://127.0.0.1:{found['port']}/mcp"
        return {"type": "http", "url": url, "headers": auth, "alwaysLoad": True}

    async def stop(self) -> None:
        """End the server (the bridge's run ends: a clean stop or a cancellation)."""
        with anyio.CancelScope(shield=True):
            await self._end()
