"""The daemon on the real local federation: --once then status, exact numbers after sbatch, no
probe shows running jobs' GPUs free while jobs start, a lost controller goes offline and comes
back, SIGTERM, and kill -9 loses nothing."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.domain import Health
from fedhpc.ops.inspect import FederationView
from fedhpc.profiles import load_profiles
from fedhpc.settings.daemon import DaemonSettings
from fedhpc.store import Store
from tests.integration.daemon_util import drain

pytestmark = pytest.mark.devfed

SITES = ("devanvil", "devdelta", "devdeltaai", "devvista")


def _total_gpus(site: str, partition: str) -> int:
    spec = load_profiles()[site].partition(partition)
    return spec.node.count * (spec.node.accelerator.count if spec.node.accelerator else 0)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "h"
    monkeypatch.setenv("FEDHPC_HOME", str(h))
    monkeypatch.setenv("FEDHPC_DEVFED", "1")
    return h


@pytest.fixture
def quiet_federation(devfed: Any) -> Iterator[Any]:
    """No jobs anywhere, before and after: exact numbers need an idle federation."""

    drain(devfed)
    yield devfed
    drain(devfed)


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fedhpc.cli.main", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
        check=False,
    )


@pytest.fixture
async def daemon(home: Path) -> AsyncIterator[tuple[subprocess.Popen[bytes], DaemonClient]]:
    env = {
        **os.environ,
        "FEDHPC_REFRESH_S": "30",
        "FEDHPC_PROBE_TIMEOUT_S": "6",
        "FEDHPC_GRACE_S": "2",
    }
    log = (home.parent / "daemon.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "fedhpc.cli.main", "daemon"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    log.close()  # the child holds its own copy
    client = DaemonClient(DaemonSettings.from_env())
    try:
        await client.wait_until_up(30)
        yield proc, client
    finally:
        await client.__aexit__()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


def _part(view: FederationView, site: str, name: str) -> Any:
    s = next(v for v in view.sites if v.site == site)
    return next(p for p in s.partitions if p.name == name)


def test_once_then_status_shows_all_four_sites_with_correct_free_gpus(
    home: Path, quiet_federation: Any
) -> None:
    once = _cli("daemon", "--once")
    assert once.returncode == 0, once.stderr
    status = _cli("status", "--json")
    assert status.returncode == 0, status.stderr
    view = FederationView.model_validate(json.loads(status.stdout))
    assert [s.site for s in view.sites] == list(SITES)
    for s in view.sites:
        assert s.health is Health.OK, s.error
        assert not s.stale
        for p in s.partitions:
            total = _total_gpus(s.site, p.name)
            assert (p.total_gpus, p.free_gpus) == (total, total), (s.site, p.name)
    table = _cli("status")
    assert "devdeltaai" in table.stdout
    assert "gh200" in table.stdout


async def test_refresh_after_sbatch_shows_exact_free_gpus_and_pending(
    quiet_federation: Any, daemon: tuple[Any, DaemonClient]
) -> None:
    _, client = daemon
    before = _part(await client.refresh(), "devdeltaai", "ghx4")
    assert (before.free_gpus, before.pending_jobs, before.running_jobs) == (4, 0, 0)
    for gpus in (3, 2):  # 3 of 4 GH200s run; the 2-GPU job has to wait
        out = quiet_federation.run(
            "devdeltaai",
            "sbatch",
            "--parsable",
            "-p",
            "ghx4",
            "-A",
            "fedhpc-gpu",
            f"--gres=gpu:gh200:{gpus}",
            "-t",
            "5",
            "-o",
            "/dev/null",
            "--wrap",
            "sleep 120",
        )
        assert out.returncode == 0, out.stderr
    with anyio.fail_after(30):
        while True:
            after = _part(await client.refresh(), "devdeltaai", "ghx4")
            # Every probe, not only the last: squeue is read before the node view, so once a
            # probe shows the 3-GPU job running (submitted first; the 2-GPU job cannot run
            # beside it) its GPUs are taken in that same probe.
            if after.running_jobs:
                assert after.free_gpus <= 1, after
            if after.running_jobs == 1 and after.pending_jobs == 1:
                break
            await anyio.sleep(0.5)
    assert after.free_gpus == 1
    assert after.max_free_gpus_on_node == 1
    assert after.user_pending_jobs == 1
    untouched = _part(await client.federation(), "devdelta", "gpuA100x4")
    assert untouched.free_gpus == 4


# 1-GPU jobs started back to back: (site, partition, how many), never more than it has GPUs.
BURST = (
    ("devdeltaai", "ghx4", 4),
    ("devdelta", "gpuA100x4", 4),
    ("devdelta", "gpuA40x4", 4),
    ("devanvil", "ai", 2),
    ("devvista", "gh", 2),
)


async def test_probes_while_gpu_jobs_start_never_show_running_jobs_gpus_free(
    quiet_federation: Any, daemon: tuple[Any, DaemonClient]
) -> None:
    """Each job is submitted while a probe of every site is under way, at a different point
    of it each time (a fraction of the last probe's duration), over three rounds; every probe
    taken is checked: a partition's running 1-GPU jobs hold at least that many of its GPUs in
    the same probe. No job ends while probes are taken (they end between rounds)."""
    _, client = daemon
    order = [(site, part) for k in range(4) for site, part, n in BURST if k < n]
    want = {(site, part): n for site, part, n in BURST}

    def check(view: FederationView) -> dict[tuple[str, str], int]:
        running = {}
        for site, part, _ in BURST:
            p = _part(view, site, part)
            assert p.free_gpus <= p.total_gpus - p.running_jobs, (site, p)
            running[(site, part)] = p.running_jobs
        return running

    def submit(site: str, part: str) -> None:
        out = quiet_federation.run(
            site,
            "sbatch",
            "-p",
            part,
            "-A",
            "fedhpc-gpu",
            "--gres=gpu:1",
            "-t",
            "5",
            "-o",
            "/dev/null",
            "--wrap",
            "sleep 600",
        )
        assert out.returncode == 0, out.stderr

    async def submit_after(delay: float, site: str, part: str) -> None:
        await anyio.sleep(delay)
        await anyio.to_thread.run_sync(submit, site, part)

    took = 0.0
    for _ in range(3):
        with anyio.fail_after(180):
            for k, (site, part) in enumerate(order):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(submit_after, took * (k % 8) / 8, site, part)
                    began = time.monotonic()
                    check(await client.refresh())
                    took = time.monotonic() - began
            while check(await client.refresh()) != want:
                await anyio.sleep(0.3)
        await anyio.to_thread.run_sync(drain, quiet_federation)


async def test_stopped_controller_goes_offline_then_comes_back(
    quiet_federation: Any, daemon: tuple[Any, DaemonClient], home: Path
) -> None:
    _, client = daemon
    pid = quiet_federation.controller_pid("devvista")
    os.kill(pid, signal.SIGTERM)
    try:
        with anyio.fail_after(30):
            while Path(f"/proc/{pid}").exists():
                await anyio.sleep(0.1)
        view = await client.refresh()  # one refresh is enough
        health = {s.site: s for s in view.sites}
        assert health["devvista"].health is Health.OFFLINE
        assert health["devvista"].error
        assert all(health[s].health is Health.OK for s in SITES if s != "devvista")
    finally:
        up = _cli("devfed", "up")
        assert up.returncode == 0, up.stderr
    with anyio.fail_after(60):
        while True:
            back = {s.site: s for s in (await client.refresh()).sites}["devvista"]
            if back.health is Health.OK:
                break
            await anyio.sleep(1)
    kinds = [(e["kind"], e["subject"]) for e in await client.events()]
    assert ("site.offline", "devvista") in kinds
    assert ("site.online", "devvista") in kinds
    assert kinds.index(("site.offline", "devvista")) < kinds.index(("site.online", "devvista"))


async def test_sigterm_stops_the_daemon_and_removes_its_socket(
    daemon: tuple[subprocess.Popen[bytes], DaemonClient], home: Path
) -> None:
    proc, client = daemon
    assert (await client.health())["sites"] == list(SITES)
    sock = home / "daemon.sock"
    assert sock.stat().st_mode & 0o777 == 0o600
    assert home.stat().st_mode & 0o777 == 0o700
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    assert not sock.exists()


async def test_a_second_daemon_for_the_same_home_is_refused(
    daemon: tuple[Any, DaemonClient],
) -> None:
    second = _cli("daemon")
    assert second.returncode == 2
    assert "already runs" in second.stderr


async def test_kill_9_loses_no_snapshot_or_event(home: Path, devfed: Any) -> None:
    env = {**os.environ, "FEDHPC_REFRESH_S": "0.2", "FEDHPC_PROBE_TIMEOUT_S": "6"}
    settings = DaemonSettings.from_env()
    proc = subprocess.Popen(
        [sys.executable, "-m", "fedhpc.cli.main", "daemon"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        async with DaemonClient(settings) as client:
            await client.wait_until_up(30)
            refreshes: set[Any] = set()
            with anyio.fail_after(30):
                while len(refreshes) < 12:  # several refreshes of every site have committed
                    refreshes |= {s.collected_at for s in (await client.federation()).sites}
                    await anyio.sleep(0.2)
            view = await client.federation()  # everything served was committed first
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    store = await Store.open(settings.db_path)
    try:
        latest = await store.latest_site_states()
        for s in view.sites:
            assert s.collected_at is not None  # served from a collected state
            assert latest[s.site].collected_at >= s.collected_at  # nothing served was lost
    finally:
        await store.close()
    # A stale socket and lock file remain; a new daemon takes over and serves at once.
    proc2 = subprocess.Popen(
        [sys.executable, "-m", "fedhpc.cli.main", "daemon"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        async with DaemonClient(settings) as client:
            await client.wait_until_up(30)
            again = await client.federation()
            assert [s.site for s in again.sites] == list(SITES)
    finally:
        proc2.send_signal(signal.SIGTERM)
        proc2.wait(timeout=30)


def test_committed_events_survive_kill_9_of_the_writer(tmp_path: Path) -> None:
    """A writer prints each event id after its commit; whatever it printed is on disk."""
    db = tmp_path / "w.db"
    code = (
        "import anyio, sys\n"
        "from datetime import datetime, UTC\n"
        "from pathlib import Path\n"
        "from fedhpc.store import Store\n"
        "async def main():\n"
        f"    s = await Store.open(Path({str(db)!r}))\n"
        "    i = 0\n"
        "    while True:\n"
        "        async with s.transaction() as tx:\n"
        "            ev = await tx.append_event('x', 's', {'i': i}, at=datetime.now(UTC))\n"
        "            now = datetime.now(UTC)\n"
        "            await tx.put_task(f't{i}', state='pending', body={'i': i}, at=now)\n"
        "        print(ev.id, flush=True)\n"
        "        i += 1\n"
        "anyio.run(main)\n"
    )
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        committed = [proc.stdout.readline().strip() for _ in range(300)]
        proc.kill()
        proc.wait(timeout=10)

    async def check() -> None:
        store = await Store.open(db)
        try:
            ids = {e.id for e in await store.events_after(0, limit=100_000)}
            assert set(committed) <= ids
            assert await store.count("tasks") == len(ids)  # effect and event: all or nothing
        finally:
            await store.close()

    anyio.run(check)
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()
