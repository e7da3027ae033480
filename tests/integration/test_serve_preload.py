"""The preloaded `fedhpc serve` host for Codex resumes (issue 37): the `fedhpc` first on a
resume's PATH hands a stdio server to the host the bridge keeps, which forks an
already-imported `fedhpc serve` in the relay's environment, folder and descriptors. Real
processes throughout: the bridge's `ServeHost`, the resume PATH's `fedhpc`, a raw MCP client
over the pipes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from fedhpc.bridge.runtimes import fedhpc_bin
from fedhpc.bridge.serve_host import ServeHost
from fedhpc.bridge.warm import alive
from tests.integration.mcp_support import INITIALIZE


@pytest.fixture
async def host(tmp_path: Path) -> AsyncIterator[ServeHost]:
    found = ServeHost(tmp_path / "h")
    (tmp_path / "h").mkdir()
    try:
        yield found
    finally:
        await found.stop()


def _pid(h: ServeHost) -> int:
    return int(json.loads(h.record.read_text())["pid"])


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":  # a zombie has ended
            out.append(int(stat.parent.name))
    return out


class Relay:
    """The resume's `fedhpc serve`, started by name from the resume PATH's folder."""

    def __init__(self, home: Path, cwd: Path, **env: str) -> None:
        exe = fedhpc_bin(home) / "fedhpc"
        full = {"PATH": f"{exe.parent}:/usr/bin:/bin", "FEDHPC_HOME": str(home), **env}
        self.proc = subprocess.Popen(
            [str(exe), "serve", "--no-autostart"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=cwd,
            env=full,
        )

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the server closed its stdout"
        answer: dict[str, Any] = json.loads(line)
        return answer


async def _until(check: Any, what: str, limit: float = 30) -> None:
    with anyio.fail_after(limit):
        while not check():
            await anyio.sleep(0.05)
    assert check(), what


async def test_a_resumes_serve_runs_in_the_host_as_its_own(host: ServeHost, tmp_path: Path) -> None:
    assert await host.ensure()
    pid = _pid(host)
    assert await host.ensure() and _pid(host) == pid  # reused, never a second host
    work = tmp_path / "project"
    work.mkdir()
    # Another home that finds the same host: the server must use the relay's home, not the
    # host's (its environment is the relay's).
    other = tmp_path / "other"
    other.mkdir()
    (other / host.record.name).symlink_to(host.record)
    relay = Relay(other, work)
    try:
        assert relay.ask(INITIALIZE)["result"]["serverInfo"]["name"] == "fedhpc"
        (child,) = _children(pid)  # the server is the host's child, not a fresh interpreter
        proc = Path(f"/proc/{child}")
        assert os.readlink(proc / "cwd") == str(work)
        held = {os.readlink(fd) for fd in (proc / "fd").iterdir()}
        for fd in (0, 1):  # the relay's own pipes, not copies of its bytes
            assert os.readlink(f"/proc/{relay.proc.pid}/fd/{fd}") in held
        tools = relay.ask({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})["result"]
        assert "submit_task" in {t["name"] for t in tools["tools"]}
        call = {"name": "get_result", "arguments": {"task_id": "t1"}}
        got = relay.ask({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": call})
        said = json.loads(got["result"]["content"][0]["text"])
        assert said["code"] == "daemon_unavailable"  # no daemon in either home
        assert f"no daemon at {other}/daemon.sock" in said["message"]
    finally:
        assert relay.proc.stdin is not None
        relay.proc.stdin.close()  # the client leaves: the server ends, the relay with it
        code = relay.proc.wait(timeout=30)
        relay.close()
    assert code == 0
    await _until(lambda: not _children(pid), "the server ended with its client")


async def test_the_server_ends_when_its_relay_is_killed(host: ServeHost, tmp_path: Path) -> None:
    """A resume stopped by the bridge is killed as a process group: the relay goes, and the
    forked server (not in that group) must not outlive it."""
    assert await host.ensure()
    pid = _pid(host)
    relay = Relay(host.home, tmp_path)
    assert relay.ask(INITIALIZE)["result"]
    (child,) = _children(pid)
    relay.proc.send_signal(signal.SIGKILL)
    relay.close()
    await _until(lambda: child not in _children(pid), "the server outlived its relay")


async def test_without_a_host_the_relay_runs_the_server_itself(
    host: ServeHost, tmp_path: Path
) -> None:
    """The host ended (the bridge stopped, or it died): a server in use keeps serving, the
    record is gone, and the next resume starts its own `fedhpc serve`."""
    assert await host.ensure()
    pid = _pid(host)
    busy = Relay(host.home, tmp_path)
    assert busy.ask(INITIALIZE)["result"]
    await host.stop()
    assert not host.record.exists() and not alive(pid)
    ping = {"jsonrpc": "2.0", "id": 3, "method": "ping"}
    assert busy.ask(ping)["id"] == 3  # its own process group: the host's end is not its end
    host.record.write_text(json.dumps({"pid": pid, "socket": str(tmp_path / "gone")}))
    alone = Relay(host.home, tmp_path)  # a stale record: nobody answers there
    try:
        assert alone.ask(INITIALIZE)["result"]["serverInfo"]["name"] == "fedhpc"
        argv = Path(f"/proc/{alone.proc.pid}/cmdline").read_bytes()
        assert b"fedhpc.cli.relay" in argv  # the relay itself is the server
    finally:
        for r in (busy, alone):
            r.close()
