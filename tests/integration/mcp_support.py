"""Helpers for the MCP tests: how to spawn `fedhpc serve`, and a raw line-level stdio session."""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mcp import StdioServerParameters

FEDHPC = shutil.which("fedhpc", path=str(Path(sys.executable).parent)) or "fedhpc"
# A client's first request (one JSON-RPC line on stdio, or a POST to the HTTP endpoint).
INITIALIZE: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    },
}


def jobs(result: dict[str, Any]) -> list[dict[str, Any]]:
    """A get_result answer's jobs, oldest first: its `attempts`, or the one job the brief form
    flattened into the answer (the same field names)."""
    if "attempts" in result:
        return list(result["attempts"])
    keys = ("site", "partition", "job_id", "wait_s", "runtime_s", "exit_code")
    return [{"n": 1, "state": result["state"]} | {k: result[k] for k in keys if k in result}]


def serve_wired() -> bool:
    """`fedhpc serve` exists once cli/main.py registers fedhpc.cli.serve."""
    from fedhpc.cli.main import build_parser

    parser = build_parser()
    choices = next(a.choices for a in parser._subparsers._actions if a.choices)  # type: ignore[union-attr]
    return "serve" in choices


def serve_argv(*extra: str) -> list[str]:
    """`fedhpc serve`, or its module form until the command is wired (test_serve_is_wired
    fails meanwhile, so the gap is visible)."""
    if serve_wired():
        return [FEDHPC, "serve", *extra]
    return [sys.executable, "-m", "fedhpc.mcp_server", *extra]


def serve_env(home: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "FEDHPC_HOME": str(home),
        "FEDHPC_DEVFED": "1",
        "FEDHPC_LOG_LEVEL": "info",
        **extra,
    }


def stdio_params(home: Path, *extra: str, **env: str) -> StdioServerParameters:
    argv = serve_argv(*extra)
    return StdioServerParameters(command=argv[0], args=argv[1:], env=serve_env(home, **env))


class RawSession:
    """`fedhpc serve` over stdio, one JSON-RPC line at a time (for what clients never send)."""

    def __init__(self, home: Path, *extra: str, **env: str) -> None:
        self.stderr_path = home.parent / f"serve-{time.monotonic_ns()}.err"
        with self.stderr_path.open("wb") as err:
            self.proc = subprocess.Popen(
                serve_argv(*extra),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env=serve_env(home, **env),
            )
        self.lines: list[bytes] = []  # every stdout line, for "only protocol on stdout"

    def send(self, message: dict[str, Any] | str) -> None:
        text = message if isinstance(message, str) else json.dumps(message)
        assert self.proc.stdin is not None
        self.proc.stdin.write(text.encode("utf-8", "surrogatepass") + b"\n")
        self.proc.stdin.flush()

    def receive(self, timeout: float = 10) -> dict[str, Any] | None:
        """The next stdout line as JSON, or None when nothing arrives within `timeout`."""
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return None
        line = self.proc.stdout.readline()
        if not line:
            return None
        self.lines.append(line)
        answer: dict[str, Any] = json.loads(line)
        return answer

    def request(self, rid: int, method: str, params: dict[str, Any] | None = None) -> Any:
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}})
        answer = self.receive()
        assert answer is not None, f"no answer to {method}"
        assert answer["id"] == rid
        return answer

    def initialize(self) -> dict[str, Any]:
        init = self.request(
            0,
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw-test", "version": "0"},
            },
        )
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        result: dict[str, Any] = init["result"]
        return result

    def close(self) -> int:
        """End of input ends the server; its exit code."""
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            code = self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(timeout=5)
        if self.proc.stdout:
            self.proc.stdout.close()
        return code


def kill_daemon_of(home: Path) -> None:
    """Stop a daemon that a test's server started detached (its pid is in the lock file)."""
    import signal

    lock = home / "daemon.lock"
    if not lock.exists():
        return
    text = lock.read_text().strip()
    if not text.isdigit():
        return
    pid = int(text)
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.1)
    if Path(f"/proc/{pid}").exists():
        os.kill(pid, signal.SIGKILL)
