"""`fedhpc demo` (the README's first command) on the local Slurm federation, end to end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fedhpc_dev.profiles import devfed_root
from tests.integration.daemon_util import drain
from tests.integration.test_demo_process import _check_resume, _demo_env

pytestmark = pytest.mark.devfed


def _demo(tmp_path: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = _demo_env(tmp_path)
    env["FEDHPC_DEVFED_DIR"] = str(devfed_root())  # the live federation: this worker's
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "fedhpc.cli.main",
            "demo",
            "--sites",
            "slurm",
            *args,
            "--home",
            str(tmp_path / "home"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _no_load_left(devfed: Any) -> None:
    """The background jobs were cancelled at the end: nothing of the demo is left in the queue."""
    left = devfed.run(
        "devanvil", "squeue", "--noheader", "--name=fedhpc-demo-load-0,fedhpc-demo-load-1"
    )
    assert left.returncode == 0
    assert left.stdout.strip() == ""


# The demo on the local Slurm clusters (`--sites slurm`) is checked on the run the dashboard
# tests keep (test_ui_dashboard.py, `test_demo_on_slurm_resumes_the_agent_with_a_replaced_attempt`):
# the same loop, one demo run fewer. Its end without --keep (the daemon stopped, the hint
# printed) is the ssh demo's below, and the process demo's.


@pytest.mark.sshd
def test_demo_over_ssh_runs_the_same_loop_through_login_hosts(devfed: Any, tmp_path: Path) -> None:
    drain(devfed)
    done = _demo(tmp_path, "--ssh", "devanvil,devdelta", "--deadline", "180")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "demo: over ssh: devanvil (127.0.0.1:" in out
    assert "each login sets its cluster's SLURM_CONF" in out
    assert "devanvil's H100s are now busy with background jobs" in out  # submitted over ssh
    _check_resume(out)
    _no_load_left(devfed)  # cancelled over ssh


def test_demo_ssh_names_the_sites_it_knows_when_given_another(tmp_path: Path) -> None:
    done = _demo(tmp_path, "--ssh", "delta", timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error[usage]: --ssh names sites that are not devfed sites: delta" in done.stderr
    assert "devanvil, devdelta, devdeltaai, devvista" in done.stderr
