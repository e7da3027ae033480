"""The burn-down reaches people: `GET /v1/federation/history?credit=true` (the dashboard's
/api/credit) carries each configured account's burn-down against its expiry, computed over
the probes it returns (a real app on a real store, served in process)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.collector import Collector
from fedhpc.daemon.app import build_app
from fedhpc.daemon.state import DaemonState
from fedhpc.domain.site import Credit
from fedhpc.orchestrator.service import Orchestrator
from fedhpc.store import Store
from tests.unit.daemon_support import in_process_client
from tests.unit.test_placement_world import cpu_partition, profile, site, state

NOW = datetime.now(UTC)
EXPIRES = (NOW + timedelta(days=30)).date()
ALPHA = site(
    profile("alpha", cpu_partition("p")),
    accounts=[
        {"name": "proj", "budget": 1000.0, "reserve": 100.0, "expires": EXPIRES},
        {"name": "open"},  # no expiry: no burn-down
    ],
)


@pytest.fixture
async def client(store: Store, tmp_path: Path) -> AsyncIterator[DaemonClient]:
    collector = Collector({"alpha": ALPHA}, {}, store)
    o = Orchestrator(store, collector, {}, retry_window_s=120)
    app = build_app(DaemonState(store, collector, NOW, o))
    async with in_process_client(app, tmp_path / "home") as c:
        yield c


async def test_credit_history_carries_each_expiring_accounts_burn_down(
    client: DaemonClient, store: Store
) -> None:
    for day, used in ((2, 0.0), (1, 100.0), (0, 200.0)):  # 100 a day for two days
        probe = state(ALPHA.profile).model_copy(
            update={
                "collected_at": NOW - timedelta(days=day),
                "credit": (Credit(account="proj", budget=1000.0, used=used, unit="SU"),),
            }
        )
        async with store.transaction() as tx:
            await tx.save_site_states([probe], keep=100)
    got = await client.history(credit=True)
    burn = got["burn"]["alpha"]
    assert set(burn) == {"proj"}
    proj = burn["proj"]
    assert proj["expires"] == EXPIRES.isoformat()
    assert proj["left"] == pytest.approx(700.0)  # 1000 - 200 used - 100 reserve
    assert proj["recent_per_day"] == pytest.approx(100.0)
    assert proj["runs_out"] is not None  # 7 days at 100 a day, well before 30
    assert "runs out on" in proj["verdict"] and "before it expires" in proj["verdict"]
    assert "burn" not in await client.history()  # the queue history is unchanged
    assert isinstance(date.fromisoformat(proj["expires"]), date)
