"""The real daemon app on a real store, served in this process: its state, and a DaemonClient
whose requests reach the app without a socket (the tests of the REST API and of the faces that
read it)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

import httpx2
import pytest
from starlette.types import ASGIApp

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.daemon.app import build_app
from fedhpc.daemon.state import DaemonState
from fedhpc.settings.daemon import DaemonSettings
from fedhpc.store import Store
from tests.unit.test_submit_accept import Clock, _orchestrator


def daemon_state(store: Store) -> DaemonState:
    """The daemon's state on `store`: an orchestrator with no sites, on a fake clock."""
    o = _orchestrator(store, Clock())
    return DaemonState(store, o.collector, datetime.now(UTC), o)


@asynccontextmanager
async def in_process_client(app: ASGIApp, home: Path) -> AsyncIterator[DaemonClient]:
    """A DaemonClient (its settings' home: `home`) whose requests go to `app` in process."""
    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://fedhpc")
    async with DaemonClient(DaemonSettings(home=home), http=http) as client:
        yield client


@pytest.fixture
async def client(store: Store, tmp_path: Path) -> AsyncIterator[DaemonClient]:
    """A client of the real daemon app on the test's `store` (SQLite in the unit tests,
    PostgreSQL where an integration module's own `store` fixture runs them), in process."""
    async with in_process_client(build_app(daemon_state(store)), tmp_path / "home") as c:
        yield c
