"""A warm MCP server for Claude resumes: one `fedhpc serve --http` on loopback, started by the
bridge and reused by every resume, so a resumed turn does not wait for a fresh `fedhpc serve`
to import the MCP SDK (~1.5 s, more on a loaded machine). It requires a bearer token (random,
in a 0600 file), answers only on 127.0.0.1, and outlives a daemon restart (its record says
where it is). If it cannot be started, resumes fall back to a stdio server."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import structlog

__all__ = ["WarmServer", "spawn_detached"]

log = structlog.get_logger(__name__)


def spawn_detached(argv: list[str], *, env: dict[str, str], cwd: str, log_path: Path) -> int:
    """Start `argv` in its own session, reparented away from us (no zombie to reap); its pid."""
    outer = 'setsid "$@" < /dev/null >> "$LOGFILE" 2>&1 & echo $!'
    done = subprocess.run(
        ["bash", "-c", outer, "fedhpc-spawn", *argv], cwd=cwd,
        env={**env, "LOGFILE": str(log_path)}, stdin=subprocess.DEVNULL, capture_output=True,
        text=True, timeout=30, check=False,
    )  # fmt: skip
    pid = int(done.stdout.strip() or "0")
    if done.returncode != 0 or pid <= 0:
        raise OSError(f"could not start {argv[0]}: {done.stderr.strip()[-200:]}")
    return pid


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(errors="replace")
    except OSError:
        return False
    return ") Z " not in stat


def _answers(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class WarmServer:
    """The bridge's resume MCP server; `entry()` is the `mcpServers.fedhpc` config to use."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.record = home / "resume-mcp.json"

    def _load(self) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = json.loads(self.record.read_text())
        except (OSError, ValueError):
            return None
        if _alive(int(found.get("pid", 0))) and _answers(int(found.get("port", 0))):
            return found
        return None

    async def _start(self) -> dict[str, Any]:
        token = secrets.token_urlsafe(32)
        port = _free_port()
        env = {k: os.environ[k] for k in ("HOME", "USER", "LANG", "PATH") if k in os.environ}
        env |= {"FEDHPC_HOME": str(self.home), "FEDHPC_MCP_TOKEN": token}
        argv = [sys.executable, "-m", "fedhpc.cli.main", "serve", "--http", "--host",
                "127.0.0.1", "--port", str(port), "--no-autostart"]  # fmt: skip
        pid = spawn_detached(argv, env=env, cwd=str(self.home),
                             log_path=self.home / "resume-mcp.log")  # fmt: skip
        with anyio.move_on_after(30):
            while not _answers(port):
                if not _alive(pid):
                    raise OSError("the resume MCP server exited at start (resume-mcp.log)")
                await anyio.sleep(0.1)
        if not _answers(port):
            raise OSError("the resume MCP server did not answer within 30 s")
        found = {"pid": pid, "port": port, "token": token}
        tmp = self.record.with_suffix(".tmp")
        tmp.write_text(json.dumps(found))
        tmp.chmod(0o600)
        tmp.replace(self.record)
        log.info("resume mcp server up", pid=pid, port=port)
        return found

    async def entry(self) -> dict[str, Any] | None:
        """The HTTP server entry (started when needed), or None when it cannot run."""
        found = self._load()
        if found is None:
            try:
                found = await self._start()
            except (OSError, subprocess.SubprocessError) as exc:
                log.warning("no warm resume MCP server; resumes start their own", error=str(exc))
                return None
        auth = {"Authorization": f"Bearer {found['token']}"}
        url = f"http://127.0.0.1:{found['port']}/mcp"
        return {"type": "http", "url": url, "headers": auth, "alwaysLoad": True}

    def stop(self) -> None:
        found = self._load()
        if found is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(found["pid"]), 15)
            self.record.unlink(missing_ok=True)
