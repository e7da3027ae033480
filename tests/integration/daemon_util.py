"""Start and stop real `fedhpc daemon` processes for integration tests; drain the federation."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.ops.continuations import DeliveryView
from fedhpc.ops.task_views import ResultManifest
from fedhpc.ops.tasks import ResultRequest
from fedhpc.settings.daemon import DaemonSettings

if TYPE_CHECKING:  # the type only: conftest's module is pytest's to import
    from tests.integration.conftest import Devfed

# A test daemon probes each site every 4 s (the dev profiles allow 2): at 2 s the probes of the
# suite's daemons were a tenth of its CPU (1,658 -> 1,490 s inside the tests, 16:45 -> 15:27;
# a site lost is still probed at once, `Collector.probe_soon`).
FAST = {
    "FEDHPC_REFRESH_S": "4",
    "FEDHPC_CYCLE_S": "1",
    "FEDHPC_PROBE_TIMEOUT_S": "6",
    "FEDHPC_GRACE_S": "2",
    "FEDHPC_INTENT_GRACE_S": "5",
}


# A daemon's start: 1 s quiet, 29.5 s from spawn to its lock beside test_store_leader's 200
# resumes on two cores (ci22e). A bound on a hang, not on start-up speed.
UP_S = 90


def start(home: Path, **env: str) -> subprocess.Popen[bytes]:
    """A daemon for `home` (FEDHPC_DEVFED=1 unless `env` says otherwise), its stderr in
    home/../daemon-<pid>.log."""
    return _spawn(home, {**os.environ, **FAST, "FEDHPC_DEVFED": "1", **env})


def start_from(home: Path, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """`start`, from `env` alone (a filtered client environment), not this process's."""
    return _spawn(home, {**FAST, "FEDHPC_DEVFED": "1", **env})


def _spawn(home: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    home.mkdir(parents=True, exist_ok=True)
    full = {**env, "FEDHPC_HOME": str(home), "FEDHPC_LOG_LEVEL": "info"}
    log = (home.parent / f"daemon-{time.monotonic_ns()}.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "fedhpc.daemon"],
        env=full,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    log.close()
    return proc


def stop(proc: subprocess.Popen[bytes], *, kill: bool = False) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        proc.wait(timeout=30)


@asynccontextmanager
async def running(home: Path, **env: str) -> AsyncIterator[DaemonClient]:
    proc = start(home, **env)
    try:
        async with DaemonClient(DaemonSettings.from_env(home=home)) as client:
            await client.wait_until_up(UP_S)
            await client.refresh()  # placement sees a fresh view from the start
            yield client
    finally:
        stop(proc)


def daemon_for_module(home: Path, **env: str) -> Iterator[Path]:
    """`running` for a fixture wider than one test (a module's: each test has its own event
    loop, so no client is shared): a daemon for `home`, up and refreshed; yields `home`."""
    proc = start(home, **env)

    async def up() -> None:
        async with DaemonClient(DaemonSettings.from_env(home=home)) as client:
            await client.wait_until_up(UP_S)
            await client.refresh()  # placement sees a fresh view from the start

    try:
        anyio.run(up)
        yield home
    finally:
        stop(proc)


async def wait_terminal(client: DaemonClient, task_id: str, limit: float = 120) -> ResultManifest:
    with anyio.fail_after(limit):
        while True:
            result = await client.get_result(ResultRequest(task_id=task_id))
            if result.state.terminal:
                return result
            await anyio.sleep(0.5)


async def job_id_of(client: DaemonClient, task_id: str, limit: float = 120) -> str:
    """The scheduler's id of the task's latest attempt, once it has one: a submit is answered
    on placement, its job id recorded when the site's submit call returns (issue 33)."""
    with anyio.fail_after(limit):
        while True:
            r = await client.get_result(ResultRequest(task_id=task_id))
            if r.attempts and r.attempts[-1].job_id:
                return r.attempts[-1].job_id
            await anyio.sleep(0.05)


async def settled(
    client: DaemonClient, *, cycles: int = 0, limit: float = 90
) -> list[DeliveryView]:
    """Every delivery, once `cycles` more control cycles have run in full, the resume bridge
    has routed every event so far (its cursor is at the newest event) and no delivery is
    pending or started: what is counted then is all that those events will ever cause. A
    test asserting "nothing new" waits for this, not a fixed sleep a slow daemon outlasts."""
    with anyio.fail_after(limit):
        if cycles:  # the cycle running now may be half done: `cycles` whole ones after it
            until = int((await client.health())["cycles"]) + cycles + 1
            while int((await client.health())["cycles"]) < until:
                await anyio.sleep(0.2)
        while True:
            unrouted = await client.events(limit=1, consumer="bridge")  # after its cursor
            busy = await client.deliveries(states=("pending", "started"))
            if not unrouted and not busy:
                return await client.deliveries()
            await anyio.sleep(0.2)


def drain(devfed: Devfed) -> None:
    """Cancel every job on every cluster and wait until the queues are empty. The clusters are
    asked side by side (a Slurm command takes a few tenths of a second on a loaded machine,
    and most tests drain before and after), and an empty federation is not waited on."""

    def cancel(site: str) -> None:
        devfed.run(site, "scancel", "--user", "root")

    def queued(site: str) -> bool:
        return bool(devfed.run(site, "squeue", "-h").stdout.strip())

    with ThreadPoolExecutor(len(devfed.sites)) as pool:
        list(pool.map(cancel, devfed.sites))
        deadline = time.monotonic() + 60
        while busy := [
            s for s, q in zip(devfed.sites, pool.map(queued, devfed.sites), strict=True) if q
        ]:
            if time.monotonic() >= deadline:
                pytest.fail(f"jobs did not drain: {busy}")
            time.sleep(0.3)


def sbatch(devfed: Devfed, site: str, *args: str) -> str:
    """Submit a job the way a person would; its output goes nowhere unless `args` say where
    (Slurm's default, slurm-<id>.out in the cwd, would litter the checkout)."""
    quiet = () if {"-o", "--output"} & set(args) else ("-o", "/dev/null")
    out = devfed.run(site, "sbatch", "--parsable", *quiet, *args)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().split(";")[0]


def store_daemon(
    home: Path,
    url: str,
    sites: Path,
    *,
    cycle_s: float = 1,
    lease_s: float = 3,
    intent_grace_s: float = 5,
    bridge_poll_s: float = 1,
) -> subprocess.Popen[bytes]:
    """A real `fedhpc daemon` on the store `url` (PostgreSQL: several may share it) and the
    private process sites in `sites`, run in `home` (a job without an output path writes
    there, not in the checkout). A process site's submit returns in well under a second, so
    an intent a killed leader left unanswered is resubmitted after `intent_grace_s`, not the
    default 45 s meant for a slow remote `sbatch`. The resume bridge looks for ended resumes
    every `bridge_poll_s`: one session's resumes run one at a time, one per look at most."""
    home.mkdir(parents=True)
    env = {
        **os.environ,
        "FEDHPC_HOME": str(home),
        "FEDHPC_STORE_URL": url,
        "FEDHPC_DEVFED": "process",
        "FEDHPC_DEVFED_DIR": str(sites),
        "FEDHPC_CYCLE_S": f"{cycle_s:g}",
        "FEDHPC_REFRESH_S": "4",
        "FEDHPC_LEASE_S": f"{lease_s:g}",
        "FEDHPC_INTENT_GRACE_S": f"{intent_grace_s:g}",
        "FEDHPC_BRIDGE_POLL_S": f"{bridge_poll_s:g}",
        "FEDHPC_LOG_LEVEL": "info",
    }
    with (home / "daemon.log").open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "fedhpc.daemon"],
            env=env, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True, cwd=home,
        )  # fmt: skip


async def poll_until(
    check: Callable[[], Awaitable[bool]], what: str, within_s: float = 120
) -> None:
    """Poll `check` until true; fail naming `what` after `within_s` (a bound, not a goal)."""
    try:
        with anyio.fail_after(within_s):
            while not await check():
                await anyio.sleep(0.2)
    except TimeoutError:
        pytest.fail(f"not within {within_s} s: {what}")
