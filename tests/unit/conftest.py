"""Fixtures shared by unit tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from fedhpc.store import Store
from tests.unit.daemon_support import client  # noqa: F401 (a fixture, shared)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    """A fresh store (SQLite, migrated) in the test's own folder."""
    s = await Store.open(tmp_path / "state" / "fedhpc.db")
    yield s
    await s.close()
