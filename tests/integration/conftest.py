"""The `devfed` fixture: the running local Slurm federation, or a failure saying how to start it;
`devfed_ssh`: the same clusters behind a real sshd (one Host alias per cluster); `sshd`: a bare
sshd on loopback for transport tests; `pg_server`: a private PostgreSQL server."""

from __future__ import annotations

import fcntl
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fedhpc.settings import DEVFED_TEST_LOCK, REQUIRE_REAL
from fedhpc_dev.devfed import DevfedError
from fedhpc_dev.devfed.manager import plan_at
from fedhpc_dev.devfed.procs import alive_pid
from fedhpc_dev.devfed.sshd import SshFront, start_front
from fedhpc_dev.postgres import PgServer, PostgresUnavailable
from fedhpc_dev.postgres import start as start_postgres
from fedhpc_dev.profiles import devfed_root

HINT = (
    "start it with `sudo fedhpc devfed up --instances 2` (both instances `pytest -n` uses; "
    "check with `fedhpc devfed status`)"
)


@dataclass(frozen=True)
class Devfed:
    """Where the federation lives and how to address one of its clusters."""

    root: Path
    sites: tuple[str, ...]

    def conf(self, site: str) -> Path:
        if site not in self.sites:
            raise KeyError(f"{site} is not a devfed site ({', '.join(self.sites)})")
        return self.root / site / "slurm.conf"

    def env(self, site: str) -> dict[str, str]:
        """Environment overrides that point Slurm commands at `site`."""
        return {"SLURM_CONF": str(self.conf(site))}

    def controller_pid(self, site: str) -> int:
        """`site`'s running slurmctld, never a stale pid file's number: pids wrap at 32,768
        here, and a signal sent to a reused one stops some other test's process."""
        (cluster,) = [c for c in plan_at(self.root).clusters if c.name == site]
        pid = alive_pid(cluster.ctld_pid, "slurmctld")
        assert pid is not None, f"{site}'s slurmctld is not running"
        return pid

    def run(self, site: str, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run a Slurm command (argv) against `site`; the caller checks the return code."""
        return subprocess.run(
            list(argv),
            env={**os.environ, **self.env(site)},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


# Tests drain every cluster (`scancel --user root`), so two pytest runs sharing one local
# federation (several checkouts on one machine) would cancel each other's jobs: one at a time.
# LOCK is instance 1's (benchmarks take it too); instance n has its own beside it.
LOCK = Path(DEVFED_TEST_LOCK.get() or "")


def lock_of(instance: int) -> Path:
    """The lock a pytest process holds on devfed instance `instance`."""
    return LOCK if instance == 1 else LOCK.with_name(f"{LOCK.stem}-{instance}{LOCK.suffix}")


@pytest.fixture(scope="session")
def devfed() -> Iterator[Devfed]:
    """The running federation at FEDHPC_DEVFED_DIR (under xdist, the worker's instance:
    tests/conftest.py, HALVES), held exclusively by this process; fails (never skips) when any
    cluster does not answer `sinfo`."""
    plan = plan_at(devfed_root())
    lock_path = lock_of(plan.instance.number)
    with lock_path.open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            sys.stderr.write(f"devfed: another test run holds {lock_path}; waiting for it\n")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield _check_devfed()


def _check_devfed() -> Devfed:
    root = devfed_root()
    plan = plan_at(root)
    fed = Devfed(root, tuple(c.name for c in plan.clusters))
    problems = []
    for cluster in plan.clusters:
        site = cluster.name
        if not cluster.conf.exists():
            problems.append(f"{site}: no {cluster.conf}")
            continue
        # A stopped controller makes sinfo retry for ~10 s; a refused connect answers at once.
        with socket.socket() as s:
            s.settimeout(2)
            if s.connect_ex(("127.0.0.1", cluster.ctld_port)) != 0:
                problems.append(f"{site}: no slurmctld on port {cluster.ctld_port}")
                continue
        try:
            out = fed.run(site, "sinfo", "-h", "-o", "%P", timeout=15)
        except subprocess.TimeoutExpired:
            problems.append(f"{site}: sinfo timed out")
            continue
        if out.returncode != 0:
            problems.append(f"{site}: {(out.stderr.strip().splitlines() or ['sinfo failed'])[-1]}")
    if problems:
        pytest.fail(
            f"the local Slurm federation at {root} is not up ({'; '.join(problems)}); {HINT}"
        )
    return fed


def _front(logins: dict[str, dict[str, str]]) -> Iterator[SshFront]:
    # A short folder: ControlPath sockets and the munge-style unix path limits stay far away.
    root = Path(tempfile.mkdtemp(prefix="fedhpc-sshd-"))
    try:
        front = start_front(root, logins)
    except DevfedError as exc:  # fail, never skip: this is how CI proves the ssh path
        pytest.fail(f"{exc.message} ({exc.hint})")
    try:
        yield front
    finally:
        front.close()


@pytest.fixture(scope="session")
def sshd() -> Iterator[SshFront]:
    """A real sshd on 127.0.0.1 with one login, `loopback`, that accepts only a freshly
    generated client key (no login environment)."""
    yield from _front({"loopback": {}})


@pytest.fixture(scope="session")
def devfed_ssh(devfed: Devfed) -> Iterator[SshFront]:
    """Every devfed cluster behind one sshd on loopback, as a user reaches a real center: a
    Host alias per cluster (`front.ssh_config`), and SLURM_CONF set by the login, not sent by
    fedhpc. Set `front.env()` (with FEDHPC_DEVFED=1) and the dev sites load with an ssh
    transport; see docs/devfed.md, "Reaching the clusters over SSH"."""
    yield from _front({site: {"SLURM_CONF": str(devfed.conf(site))} for site in devfed.sites})


@pytest.fixture
def over_ssh(devfed_ssh: SshFront, monkeypatch: pytest.MonkeyPatch) -> SshFront:
    """This test's fedhpc (and every process it starts) reaches the devfed sites over ssh."""
    monkeypatch.setenv("FEDHPC_DEVFED", "1")
    for key, value in devfed_ssh.env().items():
        monkeypatch.setenv(key, value)
    return devfed_ssh


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """A private PostgreSQL server (its own folder, a free loopback port; as root, run by the
    `postgres` user); each test makes its own database (`create_database`). Without
    PostgreSQL: a failure under FEDHPC_REQUIRE_REAL=1 (./dev test installs it), else a skip."""
    try:
        server = start_postgres()
    except PostgresUnavailable as exc:
        if REQUIRE_REAL.read():
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    try:
        yield server
    finally:
        server.stop()
