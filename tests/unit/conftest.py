"""Fixtures shared by unit tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.daemon.app import build_app
from fedhpc.store import Store
from tests.unit.daemon_support import daemon_state, in_process_client


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    """A fresh store (SQLite, migrated) in the test's own folder."""
    s = await Store.open(tmp_path / "state" / "fedhpc.db")
    yield s
    await s.close()


@pytest.fixture
async def client(store: Store, tmp_path: Path) -> AsyncIterator[DaemonClient]:
    """A client of the real daemon app on that store, served in process (no sites)."""
    async with in_process_client(build_app(daemon_state(store)), tmp_path / "home") as c:
        yield c
