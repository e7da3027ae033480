"""The `devpolaris` fixture: the local OpenPBS cluster, held by one test run at a time, or a
failure (never a skip) saying why it is absent and how to start it."""

from __future__ import annotations

import fcntl
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fedhpc.profiles import load_profiles
from fedhpc.settings import DEVFED_TEST_LOCK
from fedhpc_dev.devfed.pbs import pbs_status
from fedhpc_dev.profiles import devfed_root

SITE = "devpolaris"
HINT = "start it with `sudo fedhpc devfed up` (it says why OpenPBS is absent)"
# Apart from the Slurm lock: PBS tests and Slurm tests may run side by side.
LOCK = Path(DEVFED_TEST_LOCK.get() or "").with_name("fedhpc-devpolaris-tests.lock")


@dataclass(frozen=True)
class Devpolaris:
    """Where devpolaris lives and how to run a PBS command against it."""

    root: Path

    @property
    def conf(self) -> Path:
        return self.root / SITE / "pbs.conf"

    @property
    def bin(self) -> Path:
        return self.root / SITE / "bin"

    def env(self) -> dict[str, str]:
        path = os.environ.get("PATH", "/usr/bin:/bin")
        return {"PBS_CONF_FILE": str(self.conf), "PATH": f"{self.bin}:{path}"}

    def run(self, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run a PBS command (argv) against devpolaris; the caller checks the return code."""
        return subprocess.run(
            list(argv),
            env={**os.environ, **self.env()},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


@pytest.fixture(scope="module")
def devpolaris() -> Iterator[Devpolaris]:
    """The running devpolaris, held exclusively by this module; fails when it is not up."""
    with LOCK.open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            sys.stderr.write(f"devpolaris: another test run holds {LOCK}; waiting for it\n")
            fcntl.flock(lock, fcntl.LOCK_EX)
        root = devfed_root()
        state = pbs_status(root, socket.gethostname(), load_profiles().values())
        if not state.up:
            pytest.fail(f"the local OpenPBS cluster devpolaris is not up ({state.detail}); {HINT}")
        fed = Devpolaris(root)
        drain_pbs(fed)
        yield fed


def drain_pbs(fed: Devpolaris) -> None:
    """Delete every queued or running job on devpolaris (left by an earlier run) and wait
    until none is left; finished ones stay in `qstat -x`."""
    ids = fed.run("qselect").stdout.split()
    if ids:
        fed.run("qdel", "-W", "force", *ids)
    deadline = time.monotonic() + 60
    while fed.run("qselect").stdout.strip():
        if time.monotonic() > deadline:
            pytest.fail(f"devpolaris jobs did not drain: {fed.run('qselect').stdout.split()}")
        time.sleep(0.3)
