"""`fedhpc serve --http`: streamable HTTP on loopback, and a bearer token on any other address."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.integration.daemon_util import daemon_for_module
from tests.integration.mcp_support import serve_argv, serve_env

TOKEN = "t0ken-" + "x" * 40


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One daemon on the Slurm federation for the module's two tests that talk to one (each
    starts its own `fedhpc serve --http`); the servers refused at start need none."""
    yield from daemon_for_module(tmp_path_factory.mktemp("http") / "h")


def _start(home: Path, *args: str, **env: str) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port()
    proc = subprocess.Popen(
        serve_argv("--http", "--port", str(port), "--no-autostart", *args),
        env=serve_env(home, **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return proc, port
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc, port
        time.sleep(0.1)
    proc.kill()
    pytest.fail("the HTTP server did not start listening")


@pytest.fixture
def stop() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=15)
        for stream in (proc.stdout, proc.stderr):
            if stream:
                stream.close()


@pytest.mark.devfed
async def test_loopback_http_serves_tools_without_a_token(
    daemon: Path, stop: list[subprocess.Popen[bytes]]
) -> None:
    home = daemon
    proc, port = _start(home)
    stop.append(proc)
    async with Client(f"http://127.0.0.1:{port}/mcp", mode="legacy") as client:
        names = {t.name for t in (await client.list_tools()).tools}
        result = await client.call_tool("inspect_federation", {"sites": ["devdelta"]})
    assert "submit_task" in names
    assert not result.is_error
    assert [s["site"] for s in result.structured_content["sites"]] == ["devdelta"]


def test_another_address_without_a_token_refuses_to_start(
    tmp_path: Path, stop: list[subprocess.Popen[bytes]]
) -> None:
    proc, _ = _start(tmp_path / "h", "--host", "0.0.0.0")
    stop.append(proc)
    assert proc.wait(timeout=30) == 2
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    assert "bearer token" in err
    assert "FEDHPC_MCP_TOKEN" in err


@pytest.mark.parametrize("host", ["0.0.0.0", "127.0.0.1"])
def test_a_short_token_refuses_to_start_and_says_how_to_make_one(
    tmp_path: Path, stop: list[subprocess.Popen[bytes]], host: str
) -> None:
    """A 1-character FEDHPC_MCP_TOKEN was accepted (a token once given guards loopback too)."""
    proc, _ = _start(tmp_path / "h", "--host", host, FEDHPC_MCP_TOKEN="x")
    stop.append(proc)
    assert proc.wait(timeout=30) == 2
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    assert "FEDHPC_MCP_TOKEN has 1 characters; at least 32" in err
    assert "secrets.token_urlsafe(32)" in err


@pytest.mark.devfed
async def test_another_address_needs_the_bearer_token(
    daemon: Path, stop: list[subprocess.Popen[bytes]]
) -> None:
    home = daemon
    proc, port = _start(home, "--host", "0.0.0.0", FEDHPC_MCP_TOKEN=TOKEN)
    stop.append(proc)
    url = f"http://127.0.0.1:{port}/mcp"
    async with httpx2.AsyncClient() as http:
        for header in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
            denied = await http.post(
                url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers=header
            )
            assert denied.status_code == 401
        # RFC 9110: the scheme is case-insensitive ("bearer ..." was refused with 401).
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        lower = await http.post(url, json=ping, headers={"Authorization": f"bearer {TOKEN}"})
        assert lower.status_code != 401, lower.text
    authed = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    async with authed, Client(streamable_http_client(url, http_client=authed), mode="legacy") as c:
        result = await c.call_tool("list_events", {})
    assert not result.is_error, result.content
