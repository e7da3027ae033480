"""The other side down: the daemon's PostgreSQL store is restarted under it (an operator's
`pg_ctl restart`, a failover). The daemon keeps running, says so in its health, answers a typed
`store_unavailable` (never `internal`, never a hang), and works again once the server is back,
every task once. A private server: this test stops it, so never the suite's shared one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.errors import FedError
from fedhpc.ops.tasks import ResultRequest, SubmitTaskRequest
from fedhpc.settings import REQUIRE_REAL
from fedhpc.settings.daemon import DaemonSettings
from fedhpc_dev.postgres import PgServer, PostgresUnavailable
from fedhpc_dev.postgres import start as start_postgres
from tests.integration.daemon_util import poll_until, stop, store_daemon

ENVELOPE = {"cpus": {"min": 1, "max": 1}, "wall_time": {"min": "5m", "max": "5m"}}


@pytest.fixture
def own_server() -> Iterator[PgServer]:
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


async def test_a_database_restart_leaves_the_daemon_running_and_answering(
    tmp_path: Path, own_server: PgServer
) -> None:
    home = tmp_path / "h"
    proc = store_daemon(home, own_server.create_database(), tmp_path / "sites")
    try:
        async with DaemonClient(DaemonSettings.from_env(home=home)) as client:
            await client.wait_until_up(120)

            def task(name: str) -> SubmitTaskRequest:
                return SubmitTaskRequest(command=("true",), envelope=ENVELOPE, name=name)

            async def completed(task_id: str) -> bool:
                got = await client.get_result(ResultRequest(task_id=task_id))
                return got.state.value == "completed"

            first = (await client.submit_task(task("before"))).task_id
            await poll_until(lambda: completed(first), "a task completes", 120)

            own_server.shut_down()
            health = await client.health()  # the daemon answers for itself
            assert "does not answer" in health["store"]["error"], health["store"]
            assert health["last_event_seq"] is None
            with pytest.raises(FedError) as refused:
                await client.get_result(ResultRequest(task_id=first))
            assert refused.value.code == "store_unavailable", refused.value.as_dict()
            assert refused.value.hint and "retries by itself" in refused.value.hint
            assert proc.poll() is None  # still running

            own_server.start_again()

            async def back() -> bool:
                return "error" not in (await client.health())["store"]

            await poll_until(back, "the daemon reaches its store again", 240)
            second = (await client.submit_task(task("after"))).task_id
            await poll_until(lambda: completed(second), "a task submitted after completes", 120)
            assert await completed(first)
            assert proc.poll() is None
    finally:
        stop(proc)
    log = (home / "daemon.log").read_text()
    assert "store_unavailable" in log or "out of reach" in log  # the loops said why
