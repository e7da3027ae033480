"""`fedhpc demo` (the README's first command) on the local Slurm federation, end to end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.daemon_util import drain
from tests.integration.test_demo_process import _check_resume, _demo_env

pytestmark = pytest.mark.devfed


def test_demo_on_slurm_resumes_the_agent_with_a_replaced_attempt(
    devfed: Any, tmp_path: Path
) -> None:
    drain(devfed)
    env = _demo_env(tmp_path)
    env.pop("FEDHPC_DEVFED_DIR")  # the live federation's folder
    done = subprocess.run(
        [sys.executable, "-m", "fedhpc.cli.main", "demo", "--sites", "slurm",
         "--deadline", "180", "--home", str(tmp_path / "home")],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "local federation: 4 Slurm clusters up" in out
    assert "devanvil's H100s are now busy with background jobs" in out
    _check_resume(out)
    # The background jobs were cancelled at the end: nothing of the demo is left in the queue.
    left = devfed.run(
        "devanvil", "squeue", "--noheader", "--name=fedhpc-demo-load-0,fedhpc-demo-load-1"
    )
    assert left.returncode == 0
    assert left.stdout.strip() == ""
