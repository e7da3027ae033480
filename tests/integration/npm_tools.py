"""Version-pinned npm CLIs for the MCP client tests, cached under /tmp/fedhpc-npm.

Without node/npm (or without the registry) the tests skip locally, and fail when `CI` or
`FEDHPC_REQUIRE_REAL` is set: CI must exercise the real clients."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fedhpc.settings import NPM_CACHE, REQUIRE_REAL

CACHE = Path(NPM_CACHE.get() or "")
INSPECTOR = ("@modelcontextprotocol/inspector", "2.12.0", "mcp-inspector")
CODEX = ("@openai/codex", "0.171.0", "codex")
CLAUDE_CODE = ("@anthropic-ai/claude-code", "2.1.197", "claude")


def must_be_real() -> bool:
    return bool(os.environ.get("CI") or REQUIRE_REAL.read())


def unavailable(reason: str) -> None:
    """Fail in CI (or with FEDHPC_REQUIRE_REAL), skip elsewhere."""
    if must_be_real():
        pytest.fail(f"{reason} (CI/FEDHPC_REQUIRE_REAL is set: the real client must run)")
    pytest.skip(reason)


def npm_tool(package: str, version: str, binary: str) -> Path:
    """The path of `binary` from `package@version`, installing it once into the cache."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            unavailable(f"{tool} is not installed")
    folder = CACHE / f"{package.replace('/', '+')}@{version}"
    exe = folder / "node_modules" / ".bin" / binary
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel test runs install once
        if not exe.exists():
            out = subprocess.run(
                [
                    "npm",
                    "install",
                    "--prefix",
                    str(folder),
                    "--no-audit",
                    "--no-fund",
                    "--loglevel=error",
                    f"{package}@{version}",
                ],
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            if out.returncode != 0 or not exe.exists():
                unavailable(f"npm install {package}@{version} failed: {out.stderr[-400:]}")
    return exe
