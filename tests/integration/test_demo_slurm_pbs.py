"""`fedhpc demo --sites slurm+pbs`: one group over the four Slurm clusters and devpolaris
(OpenPBS); the child stuck behind devpolaris's busy A100s (qsub, qstat) is moved across
schedulers to a Slurm cluster (qdel), where it completes, and the agent is resumed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fedhpc_dev.profiles import devfed_root
from tests.integration.daemon_util import drain
from tests.integration.pbs_support import Devpolaris, devpolaris
from tests.integration.test_demo_process import _demo_env

__all__ = ["devpolaris"]  # the fixture, imported for pytest

pytestmark = pytest.mark.devfed

SITES = {"devanvil", "devdelta", "devdeltaai", "devpolaris", "devvista"}


def test_demo_places_one_group_over_slurm_and_pbs_and_replaces_a_stuck_child(
    devfed: Any, devpolaris: Devpolaris, tmp_path: Path
) -> None:
    drain(devfed)
    env = _demo_env(tmp_path)
    env["FEDHPC_DEVFED_DIR"] = str(devfed_root())  # the live federation: this worker's
    argv = ["demo", "--sites", "slurm+pbs", "--deadline", "240", "--home", str(tmp_path / "h")]
    done = subprocess.run(
        [sys.executable, "-m", "fedhpc.cli.main", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "local federation: devpolaris (OpenPBS) up" in out
    assert "agent: group completed: {'completed': 5}" in out, out
    rows = [ln.split() for ln in out.splitlines() if re.match(r"^  t[0-9a-f]{6,}(-\d+)? +\d ", ln)]
    assert len({r[0] for r in rows}) == 5, out
    assert {r[2] for r in rows} <= SITES
    assert "devpolaris's A100s (PBS) are now busy" in out, out
    # The child placed on the PBS site waited behind the load there and was moved to Slurm.
    replaced = [r for r in rows if "superseded, re-placed" in " ".join(r)]
    assert len(replaced) == 1 and replaced[0][2] == "devpolaris", out
    final = [r for r in rows if r[0] == replaced[0][0] and r[1] == "2"]
    assert final and final[0][4] == "completed" and final[0][2] in SITES - {"devpolaris"}, out
    assert all(r[4] == "completed" for r in rows if r not in replaced), out
    assert re.search(r"demo: done in \d+s with zero status calls by the agent", out), out
    left = devpolaris.run("qselect", "-N", "fedhpc-demo-load-0")  # the load was cancelled
    assert left.returncode == 0 and not left.stdout.strip(), left.stdout
