"""The dashboard's allocation table charges the live work at the charge the daemon knows:
the partition's live billing weights where they replace the profile's (issue 42). The UI has
no probe of its own: /api/charges reads the daemon's ledger, through the real daemon app."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import httpx2

from fedhpc.collector import Collector
from fedhpc.daemon.app import build_app
from fedhpc.daemon.state import DaemonState
from fedhpc.domain import ChargeKind, ChargeModel
from fedhpc.orchestrator.service import Orchestrator
from fedhpc.store import Store
from fedhpc.ui.server import build_ui_app
from tests.unit.daemon_support import in_process_client
from tests.unit.test_placement_world import cpu_partition, env, profile, site, state
from tests.unit.test_slow_site import _Site
from tests.unit.test_submit_accept import Clock, _req

TOKEN = {"X-Fedhpc-Token": "s3cret"}


async def test_the_allocation_table_follows_the_billing_weights_the_daemon_read(
    store: Store, tmp_path: Path
) -> None:
    # The profile bills a core-hour at 1.0 and follows the scheduler; alpha's last probe read
    # CPU weight 2.0, then 3.0.
    charge = ChargeModel(kind=ChargeKind.CORE_HOURS, follow_scheduler=True)
    alpha = site(profile("alpha", cpu_partition("cpu"), charge=charge))
    collector = Collector({"alpha": alpha}, {}, store, clock=Clock())
    collector.latest = {"alpha": state(alpha.profile, cpu={"billing_weights": (("CPU", 2.0),)})}
    collector.ready.set()
    o = Orchestrator(store, collector, {"alpha": cast(Any, _Site(alpha))}, clock=Clock())
    req = _req(command=("true",), envelope=env(cpus=4, wall_time="1h"))
    await o.intake.submit_task(req, wait_s=0)
    await o.place_queued()
    daemon = DaemonState(store, collector, datetime.now(UTC), o)
    async with in_process_client(build_app(daemon), tmp_path / "home") as client:
        app = build_ui_app(client, token="s3cret", port=8790)
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:8790") as ui:
            got = (await ui.get("/api/charges", headers=TOKEN)).json()
            (row,) = got["charges"]
            # 4 cores for an hour at the live 2.0, not the profile's 1.0.
            assert (row["site"], row["queued"], row["running"], row["jobs"]) == (
                "alpha",
                8.0,
                0.0,
                1,
            )
            assert got["read"] == 1 and got["more"] is False
            cpu = {"billing_weights": (("CPU", 3.0),)}
            collector.latest = {"alpha": state(alpha.profile, cpu=cpu)}  # the next probe
            (row,) = (await ui.get("/api/charges", headers=TOKEN)).json()["charges"]
            assert row["queued"] == 12.0
