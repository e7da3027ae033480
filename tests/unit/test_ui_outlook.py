"""The wait fedhpc would predict now for 1 GPU, 1 node and 4 GPUs per partition
(GET /v1/federation/outlook, /api/outlook): placement's own decision on the daemon's latest
probes, learned index and claims, a partition that cannot run a request saying why, each wait
labelled with its estimator. A real store, the real daemon and dashboard apps; no site is
contacted."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx2
import pytest

from fedhpc.daemon.app import build_app
from fedhpc.daemon.state import DaemonState
from fedhpc.orchestrator import Orchestrator
from fedhpc.orchestrator.outlook import NOT_ASKED, WaitOutlook
from fedhpc.orchestrator.records import TaskRecord
from fedhpc.placement import Placement, WaitObservation
from fedhpc.placement.outlook import REQUESTS, reference_envelope
from fedhpc.store import Store
from fedhpc.ui.server import build_ui_app
from tests.unit.daemon_support import in_process_client
from tests.unit.test_placement_world import NOW, cpu_partition, gpu_partition, profile, site, state
from tests.unit.test_submit_accept import Clock, _orchestrator, _req

ALPHA = profile("alpha", gpu_partition("gpu4"), cpu_partition("cpu"))
BETA = profile("beta", gpu_partition("gpu2", per_node=2))
TOKEN = {"X-Fedhpc-Token": "s3cret"}


def _federation(store: Store) -> Orchestrator:
    """alpha/gpu4: every GPU taken, three jobs pending; alpha/cpu: idle, no GPU; beta/gpu2:
    idle nodes of 2 GPUs. alpha/gpu4 has three observed 1-GPU waits (the learned index)."""
    o = _orchestrator(store, Clock(), alpha=site(ALPHA), beta=site(BETA))
    busy = {"pending_jobs": 3, "free_gpus": 0, "max_free_gpus_on_node": 0}
    o.collector.latest["alpha"] = state(ALPHA, gpu4=busy)
    o.collector.latest["beta"] = state(BETA)
    o.waits.user_waits["alpha"] = [
        WaitObservation(
            site="alpha",
            partition="gpu4",
            gpus=1,
            wait_s=w,
            observed_at=NOW - timedelta(minutes=i + 1),
            job=str(i),
        )
        for i, w in enumerate((300.0, 400.0, 500.0))
    ]
    return o


@pytest.fixture
async def ui(
    store: Store, tmp_path: Path
) -> AsyncIterator[tuple[httpx2.AsyncClient, Orchestrator]]:
    """The dashboard's app over a client of the real daemon app, on the federation above."""
    o = _federation(store)
    daemon = build_app(DaemonState(store, o.collector, NOW, o))
    async with in_process_client(daemon, tmp_path / "home") as client:
        app = build_ui_app(client, token="s3cret", port=8790)
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:8790") as h:
            yield h, o


def _cells(body: dict[str, Any]) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(r["site"], r["partition"], r["request"]): r for r in body["rows"]}


async def test_the_outlook_has_three_requests_per_partition_and_says_which_cannot_run(
    ui: tuple[httpx2.AsyncClient, Orchestrator],
) -> None:
    h, _ = ui
    assert (await h.get("/api/outlook")).status_code == 403  # the token, as every read
    got = await h.get("/api/outlook", headers=TOKEN)
    assert got.status_code == 200
    body = got.json()
    assert body["requests"] == ["1 GPU", "1 node", "4 GPUs"] == list(REQUESTS)
    assert body["at"] == NOW.isoformat() and body["scheduler"] == NOT_ASKED
    cells = _cells(body)
    parts = [("alpha", "cpu"), ("alpha", "gpu4"), ("beta", "gpu2")]
    assert sorted(cells) == sorted((s, p, r) for s, p in parts for r in REQUESTS)
    # A CPU partition runs a whole node but no GPU request; a 2-GPU node no 4-GPU request:
    # no number, the rules' own reasons.
    for request in ("1 GPU", "4 GPUs"):
        cpu = cells[("alpha", "cpu", request)]
        assert cpu["wait_s"] is None and cpu["method"] == "" and cpu["source"] == ""
        assert "accelerator: alpha/cpu has no accelerators" in cpu["why"]
    two = cells[("beta", "gpu2", "4 GPUs")]
    assert two["wait_s"] is None
    assert two["why"] == "capacity: needs 4 GPUs per node; a beta/gpu2 node has 2"
    # The whole node is each partition's own: 128 CPUs there, 2 GPUs and 64 CPUs on beta.
    assert cells[("alpha", "cpu", "1 node")]["shape"].startswith("n1-g0-c128-")
    assert cells[("beta", "gpu2", "1 node")]["shape"].startswith("n1-g2-c64-")
    # Each wait labelled with its estimator, as the decision writes it: a free slot now
    # (paper), the learned waits of 1-GPU jobs on alpha/gpu4 (median 400 s), and the queue
    # depth for 4 GPUs there (no learned wait at that size or larger).
    free = cells[("beta", "gpu2", "1 GPU")]
    assert (free["method"], free["source"], free["wait_s"]) == ("paper", "paper:free-slots=4", 10.0)
    learned = cells[("alpha", "gpu4", "1 GPU")]
    assert learned["method"] == "learned" and learned["source"] == "learned:gpu:1 (n=3)"
    assert learned["wait_s"] == 400.0 and learned["p90_s"] == 500.0
    deep = cells[("alpha", "gpu4", "4 GPUs")]
    assert deep["method"] == "paper" and deep["source"] == "paper:queue-depth=3"
    assert deep["wait_s"] is not None and deep["wait_s"] > free["wait_s"]


@pytest.mark.parametrize("request_name", REQUESTS)
async def test_each_wait_is_the_one_the_placers_first_pass_ranks_by(
    ui: tuple[httpx2.AsyncClient, Orchestrator], request_name: str
) -> None:
    """The placer's own first pass (before it asks any scheduler) for a task with the
    reference envelope on each site: each partition's best candidate has the outlook's wait
    and source, and a partition without a feasible one is "cannot run" there too."""
    h, o = ui
    cells = _cells((await h.get("/api/outlook", headers=TOKEN)).json())
    history, errors = await o.waits.history(), await o.waits.errors()
    for name in ("alpha", "beta"):
        for part in o.collector.sites[name].profile.partitions:
            env = reference_envelope(request_name, part)
            env = env.model_copy(update={"sites_include": (name,)})
            task = TaskRecord(
                id=f"t-{name}-{part.name}",
                request=_req(envelope=env),
                idempotency_key="k",
                created_at=NOW,
            )
            attempt, avoid, _ = o.planner.plan(
                task,
                exclude=(),
                wall_s=None,
                waits=history,
                ledger=o.claims.ledger(),
                errors=errors,
            )
            decision = attempt(avoid, None)
            cell = cells[(name, part.name, request_name)]
            ran = [
                c
                for c in decision.trace.candidates
                if (c.site, c.partition) == (name, part.name) and c.feasible
            ]
            if not ran:
                assert cell["wait_s"] is None and cell["why"], cell
                continue
            e = ran[0].estimates
            assert e is not None
            assert (cell["wait_s"], cell["p90_s"], cell["source"]) == (
                e.wait_s,
                e.wait_p90_s,
                e.wait_source,
            ), cell
            if isinstance(decision, Placement) and decision.partition == part.name:
                assert cell["wait_s"] == decision.estimates.wait_s


async def test_it_is_computed_again_only_when_the_probes_change(
    ui: tuple[httpx2.AsyncClient, Orchestrator],
) -> None:
    h, o = ui
    first = (await h.get("/api/outlook", headers=TOKEN)).json()
    again = (await h.get("/api/outlook", headers=TOKEN)).json()
    assert again == first
    kept = WaitOutlook(o.collector, o.waits, o.claims, o.clock)
    assert await kept.answer() is await kept.answer() and kept.computed == 1
    busy = {"pending_jobs": 9, "free_gpus": 0, "max_free_gpus_on_node": 0}
    o.collector.latest["beta"] = state(BETA, gpu2=busy)  # a new probe of beta
    after = _cells((await h.get("/api/outlook", headers=TOKEN)).json())
    assert after[("beta", "gpu2", "1 GPU")]["source"] == "paper:queue-depth=9"
    await kept.answer()
    assert kept.computed == 2


def test_the_outlook_is_pure() -> None:
    """Importing it loads no I/O library (habit 1: pure core)."""
    code = (
        "import sys, fedhpc.placement.outlook\n"
        "io = ('anyio', 'httpx', 'httpx2', 'sqlite3', 'asyncssh')\n"
        "bad = [m for m in io if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
