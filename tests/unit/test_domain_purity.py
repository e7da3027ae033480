"""The pure core (domain, dialects, profiles) imports no I/O library: checked in a fresh
interpreter, so an accidental import anywhere in the chain is caught."""

from __future__ import annotations

import json
import subprocess
import sys

FORBIDDEN = {
    "anyio",
    "aiosqlite",
    "asyncio",
    "globus_sdk",
    "globus_compute_sdk",
    "httpx",
    "httpx2",
    "mcp",
    "sqlite3",
    "structlog",
    "subprocess",
    "tenacity",
}

PURE_MODULES = (
    "fedhpc.domain",
    "fedhpc.profiles",
    "fedhpc.adapters.dialects.common",
    "fedhpc.adapters.dialects.slurm",
    "fedhpc.adapters.dialects.pbs",
    "fedhpc.adapters.dialects.lsf",
    "fedhpc.adapters.dialects.process",
    "fedhpc.placement",
    "fedhpc.ops",
)


def test_pure_core_loads_no_io_library() -> None:
    code = (
        "import importlib, json, sys\n"
        f"for m in {PURE_MODULES!r}: importlib.import_module(m)\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout))
    assert "fedhpc" in loaded
    assert not loaded & FORBIDDEN, f"pure modules pulled in {sorted(loaded & FORBIDDEN)}"
