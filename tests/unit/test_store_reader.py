"""The store's quick reads (a REST request's, `quick_reads`, on the reader connection): they
never queue behind a write transaction's statements and see only committed data, while a
transaction's own task still reads its own writes; the daemon's guard answers every request
with them."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import anyio
import httpx2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fedhpc.daemon.guard import guard
from fedhpc.store import Store, quick_reads

T0 = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)


class _Busy:
    """A transaction whose writer's thread sits inside one statement until `release`."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.entered, self.gate = threading.Event(), threading.Event()

    def _hold(self) -> int:
        self.entered.set()
        self.gate.wait(30)
        return 1

    async def run(self) -> None:
        async with self.store.transaction() as tx:
            await tx.put_task("t1", state="running", body={"n": 2}, at=T0)
            await tx.conn.create_function("hold", 0, self._hold)
            await tx.fetch("SELECT hold()")

    async def started(self) -> None:
        assert await anyio.to_thread.run_sync(self.entered.wait, 10)


async def _committed(store: Store) -> None:
    async with store.transaction() as tx:
        await tx.put_task("t1", state="queued", body={"n": 1}, at=T0)


async def test_quick_reads_are_answered_while_a_transaction_keeps_the_writer(store: Store) -> None:
    await _committed(store)
    busy = _Busy(store)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(busy.run)
            await busy.started()
            # On the writer's connection these would wait for the statement (30 s): quick
            # reads answer at once, with the last commit (not the uncommitted 'running').
            with anyio.fail_after(10), quick_reads():
                task = await store.get_task("t1")
                listing = await store.task_listing(limit=10)
                seq = await store.last_seq()
            assert task is not None
            assert (task["state"], task["body"]) == ("queued", {"n": 1})
            assert [t["state"] for t in listing] == ["queued"]
            assert seq == 0
            assert not busy.gate.is_set()  # the transaction was open throughout
            busy.gate.set()
    finally:
        busy.gate.set()
    after = await store.get_task("t1")
    assert after is not None
    assert after["state"] == "running"  # committed: every reader sees it now


async def test_a_transaction_in_quick_reads_reads_its_own_writes(store: Store) -> None:
    with quick_reads():
        async with store.transaction() as tx:
            await tx.put_task("t2", state="queued", body={}, at=T0)
            own = await store.get_task("t2")  # its own uncommitted row: the writer's connection
        assert own is not None
        assert own["state"] == "queued"
        assert await store.get_task("t2") is not None  # committed: the quick reader sees it


async def test_the_daemon_guard_answers_requests_with_quick_reads(store: Store) -> None:
    await _committed(store)

    async def handler(request: Request) -> Response:
        task = await store.get_task("t1")
        assert task is not None
        return JSONResponse({"state": task["state"]})

    app = Starlette(routes=[Route("/t", guard(handler))])
    busy = _Busy(store)
    transport = httpx2.ASGITransport(app=app)
    try:
        async with (
            anyio.create_task_group() as tg,
            httpx2.AsyncClient(transport=transport, base_url="http://daemon") as client,
        ):
            tg.start_soon(busy.run)
            await busy.started()
            with anyio.fail_after(10):
                answer = await client.get("/t")
            assert answer.json() == {"state": "queued"}
            assert not busy.gate.is_set()
            busy.gate.set()
    finally:
        busy.gate.set()


async def test_the_reader_cannot_write(store: Store) -> None:
    reader = store._quick  # the connection under test
    assert reader is not None
    rows = list(await reader.execute_fetchall("PRAGMA query_only"))
    assert rows[0][0] == 1
