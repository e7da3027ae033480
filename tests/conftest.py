"""Shared fixtures: an isolated fedhpc home for every test, and the canary folder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def isolated_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Every test gets its own FEDHPC_HOME so no test reads the developer's config."""
    home = tmp_path_factory.mktemp("fedhpc-home")
    monkeypatch.setenv("FEDHPC_HOME", str(home))
    monkeypatch.delenv("FEDHPC_CONFIG", raising=False)
    return home


@pytest.fixture
def canary_dir(tmp_path: Path) -> Iterator[Path]:
    """A folder that must still hold no canary file when the test ends."""
    d = tmp_path / "canary"
    d.mkdir()
    yield d
    leaked = list(d.iterdir())
    assert not leaked, f"an injection string executed: {leaked}"
