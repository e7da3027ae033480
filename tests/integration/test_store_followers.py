"""Followers answer: a second daemon on one PostgreSQL store that does not lead still serves
REST (and MCP through it). A submit through it is a durable write the leader's placer picks
up, woken by NOTIFY (store/listen.py); its reads and event waits answer like the leader's."""

from __future__ import annotations

import signal
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest

from fedhpc.cli.daemon import _status_lines
from fedhpc.client.daemon_client import DaemonClient
from fedhpc.ops.tasks import ResultRequest, SubmitTaskRequest
from fedhpc.settings.daemon import DaemonSettings
from fedhpc.store import Store
from fedhpc.store.lease import holder_of
from fedhpc_dev.postgres import PgServer
from tests.integration.daemon_util import poll_until, start, stop, store_daemon

ENVELOPE = {"cpus": {"min": 1, "max": 1}, "wall_time": {"min": "5m", "max": "5m"}}


Pair = tuple[Store, DaemonClient, DaemonClient, int]


@pytest.fixture
async def pair(tmp_path: Path, pg_server: PgServer) -> AsyncIterator[Pair]:
    """Daemon A leads (its loops run), then daemon B follows on the same database: the
    store, a client of A, a client of B, and A's pid."""
    url = pg_server.create_database()
    store = await Store.open_url(url)
    sites = tmp_path / "sites"
    a = store_daemon(tmp_path / "a", url, sites, cycle_s=2, lease_s=10)
    procs = [a]
    try:
        async with DaemonClient(DaemonSettings.from_env(home=tmp_path / "a")) as ca:
            await ca.wait_until_up(120)

            async def a_leads() -> bool:
                now = await holder_of(store)
                return now is not None and str(now["holder"]).endswith(f":{a.pid}")

            await poll_until(a_leads, "A leads the store")
            procs.append(store_daemon(tmp_path / "b", url, sites, cycle_s=2, lease_s=10))
            async with DaemonClient(DaemonSettings.from_env(home=tmp_path / "b")) as cb:
                await cb.wait_until_up(120)  # B answers although A leads
                yield store, ca, cb, a.pid
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=60)
        await store.close()


async def test_a_follower_takes_submits_the_leader_places_and_answers_reads(pair: Pair) -> None:
    store, ca, cb, a_pid = pair
    health = await cb.health()
    assert (health["store"]["engine"], health["store"]["lease_token"]) == ("postgresql", None)
    lines = _status_lines(health, 1, now=0.0)
    assert any("this daemon follows" in x and x.endswith(f":{a_pid}") for x in lines), lines
    assert health["store"]["leader"]["live"] is True
    assert (await ca.health())["store"]["lease_token"] == 1
    req = SubmitTaskRequest(command=("true",), envelope=ENVELOPE, name="via-b")
    tid = (await cb.submit_task(req)).task_id

    async def completed() -> bool:
        return (await cb.get_result(ResultRequest(task_id=tid))).state.value == "completed"

    await poll_until(completed, "the task submitted through the follower completes", 240)
    attempts = await store.attempts(tid)
    assert len(attempts) == 1  # placed and dispatched once, by the leader
    now = await holder_of(store)
    assert now is not None and str(now["holder"]).endswith(f":{a_pid}")  # B never led
    assert (await ca.get_result(ResultRequest(task_id=tid))).state.value == "completed"
    assert tid in {t.task_id for t in await cb.tasks(limit=50)}


async def test_a_followers_event_wait_wakes_on_the_leaders_events(pair: Pair) -> None:
    """A long poll of the follower's event log (GET /v1/events?wait_s=) answers with the
    events the leader writes, woken by NOTIFY, well before its wait ends."""
    _, ca, cb, _ = pair
    newest = max([0, *(e["seq"] for e in await cb.events(after=0, limit=1000))])
    got: list[dict[str, object]] = []
    took: list[float] = []
    submitted: list[str] = []

    async def wait_on_b() -> None:
        """Long polls from `newest` on, until the submitted task's events came (the leader
        may write others first, e.g. of its sites)."""
        after = newest
        while not submitted or submitted[0] not in {e["subject"] for e in got}:
            t0 = time.monotonic()
            page = await cb.events(after=after, wait_s=240)
            took.append(time.monotonic() - t0)
            assert page, "the follower's wait ended with no event"
            got.extend(page)
            after = int(page[-1]["seq"])

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait_on_b)
        await anyio.sleep(0.5)  # the poll is (most likely) waiting; if not, it reads at once
        req = SubmitTaskRequest(command=("true",), envelope=ENVELOPE, name="via-a")
        submitted.append((await ca.submit_task(req)).task_id)
    # Woken, not timed out: each wait would have lasted 240 s without a notification.
    assert max(took) < 200


async def test_a_followers_view_is_the_leaders_probes_and_it_never_probes(
    pair: Pair, tmp_path: Path
) -> None:
    """A follower's inspect_federation shows the leader's probes as they are stored (fresh,
    not the snapshot it loaded at start), and the follower sends no scheduler command."""
    _, _, cb, _ = pair
    never = datetime.min.replace(tzinfo=UTC)
    first = {s.site: s.collected_at or never for s in (await cb.federation()).sites}

    async def newer() -> bool:
        now = {s.site: s.collected_at or never for s in (await cb.federation()).sites}
        return all(now[k] > v for k, v in first.items())

    await poll_until(newer, "the follower's view has each site's newer probe", 120)
    log = (tmp_path / "b" / "daemon.log").read_text()
    assert "following" in log and "probed" not in log  # `probed`: each probe's log line


async def test_a_long_poll_answers_at_once_when_its_daemon_stops(tmp_path: Path) -> None:
    """A reader waiting on GET /v1/events?wait_s= does not hold its daemon's stop up: it is
    answered (with what there is) and the daemon exits well inside the wait."""
    env = {"FEDHPC_DEVFED": "process", "FEDHPC_DEVFED_DIR": str(tmp_path / "sites")}
    proc = start(tmp_path / "h", **env)
    try:
        async with DaemonClient(DaemonSettings.from_env(home=tmp_path / "h")) as client:
            await client.wait_until_up(120)
            after = max([0, *(e["seq"] for e in await client.events(after=0, limit=1000))])
            pages: list[list[dict[str, object]]] = []

            async def wait() -> None:
                pages.append(await client.events(after=after, wait_s=240))

            t0 = time.monotonic()
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                await anyio.sleep(1)  # the poll is (most likely) waiting
                proc.send_signal(signal.SIGTERM)
            await anyio.to_thread.run_sync(proc.wait, 120)
            took = time.monotonic() - t0
    finally:
        stop(proc, kill=True)
    assert len(pages) == 1  # answered, not failed: the daemon was still up to answer
    assert took < 120  # the wait was 240 s: answered at the stop, not at its end
