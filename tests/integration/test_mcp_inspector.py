"""The MCP Inspector CLI (npm @modelcontextprotocol/inspector@2.12.0) drives `fedhpc serve`:
an independent client, in node, over stdio and over streamable HTTP."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.daemon_util import daemon_for_module
from tests.integration.mcp_support import serve_argv
from tests.integration.npm_tools import INSPECTOR, npm_tool

pytestmark = pytest.mark.devfed


@pytest.fixture(scope="module")
def inspector() -> Path:
    return npm_tool(*INSPECTOR)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One daemon for the module's home: every test here only reads (tools, the federation,
    a refused call), so none sees another's work; each starts its own `fedhpc serve`."""
    yield from daemon_for_module(tmp_path_factory.mktemp("inspector") / "h")


def _inspect(exe: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Inspector's stderr carries the server's; only its stdout is the answer."""
    target = serve_argv("--no-autostart")
    return subprocess.run(
        [str(exe), "--cli", "-e", f"FEDHPC_HOME={home}", "-e", "FEDHPC_DEVFED=1", *target, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "HOME": str(home.parent / "inspector-home")},
    )


def _json(out: subprocess.CompletedProcess[str], exit_code: int = 0) -> Any:
    assert out.returncode == exit_code, out.stderr[-2000:]
    return json.loads(out.stdout)


def test_tools_list_has_schemas_annotations_and_no_portability_errors(
    inspector: Path, daemon: Path
) -> None:
    home = daemon
    out = _inspect(inspector, home, "--method", "tools/list", "--strict")
    tools = {t["name"]: t for t in _json(out)["tools"]}
    assert "0 errors" in out.stderr
    assert len(tools) == 10
    for tool in tools.values():
        assert tool["inputSchema"]["type"] == "object"
        assert tool["outputSchema"]["type"] == "object"
    assert tools["cancel"]["annotations"]["destructiveHint"] is True
    assert tools["inspect_federation"]["annotations"]["readOnlyHint"] is True


def test_tools_call_inspects_the_federation(inspector: Path, daemon: Path) -> None:
    home = daemon
    out = _inspect(
        inspector,
        home,
        "--method",
        "tools/call",
        "--tool-name",
        "inspect_federation",
        "--tool-arg",
        "accelerator=h100",
    )
    result = _json(out)
    assert result["isError"] is False
    sites = [s["site"] for s in result["structuredContent"]["sites"]]
    assert sites == ["devanvil"]


def test_tools_call_with_a_bad_argument_returns_a_typed_error(
    inspector: Path, daemon: Path
) -> None:
    home = daemon
    out = _inspect(
        inspector,
        home,
        "--method",
        "tools/call",
        "--tool-name",
        "get_result",
        "--tool-arg",
        "task_id=t_x",
        "max_bytes=0",
    )
    result = _json(out, exit_code=5)  # the Inspector exits 5 on an isError result
    assert result["isError"] is True
    body = json.loads(result["content"][0]["text"])
    assert body["code"] == "validation"
    assert [f["field"] for f in body["fields"]] == ["max_bytes"]


def test_resources_read_returns_the_snapshot(inspector: Path, daemon: Path) -> None:
    home = daemon
    out = _inspect(inspector, home, "--method", "resources/read", "--uri", "fedhpc://federation")
    (content,) = _json(out)["contents"]
    assert content["mimeType"] == "application/json"
    assert len(json.loads(content["text"])["sites"]) == 4
