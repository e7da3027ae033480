"""The dashboard's wait-estimator table: where `auto` uses each estimator (the same rule as the
placement's EstimatorErrors.prefer), and /api/estimators read through the real daemon app."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx2
import pytest

from fedhpc.daemon.app import build_app
from fedhpc.placement.errors import ErrorObservation, EstimatorErrors
from fedhpc.store import Store
from fedhpc.ui.estimators import SCHEDULER_FIRST, with_auto
from fedhpc.ui.server import build_ui_app
from tests.unit.daemon_support import daemon_state, in_process_client

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _judged(waits: dict[tuple[str, str, str], list[tuple[float, float]]]) -> EstimatorErrors:
    """The placement's errors for these (predicted, observed) waits, as the daemon keeps them."""
    obs = [
        ErrorObservation(site, part, method, p, o, NOW - timedelta(minutes=i))
        for (site, part, method), pairs in waits.items()
        for i, (p, o) in enumerate(pairs)
    ]
    return EstimatorErrors(obs, now=NOW, window_s=86400, min_samples=3)


def test_auto_is_marked_where_the_errors_decide_and_nowhere_else() -> None:
    three = [(100.0, 10.0), (90.0, 10.0), (80.0, 10.0)]  # learned: ~80 s too long
    close = [(12.0, 10.0), (15.0, 10.0), (9.0, 10.0)]  # paper: within 5 s
    waits = {
        ("a", "gpu", "learned"): three,
        ("a", "gpu", "paper"): close,
        ("a", "gpu", "scheduler"): [(10.0, 10.0)],
        ("b", "cpu", "learned"): close,
        ("b", "cpu", "paper"): three,
        ("c", "cpu", "learned"): three,  # paper judged on too few jobs: nothing to say
        ("c", "cpu", "paper"): close[:2],
        # Errors 10.04 s vs 10.01 s: equal once rounded to 0.1 s, paper better unrounded.
        ("d", "cpu", "learned"): [(20.04, 10.0)] * 3,
        ("d", "cpu", "paper"): [(20.01, 10.0)] * 3,
    }
    errors = _judged(waits)
    rows = errors.as_rows()  # what the daemon's /v1/estimators answers
    auto = {(r["site"], r["method"]): r["auto"] for r in with_auto(rows)}
    # Paper is marked exactly where the placement's own rule prefers it over learned.
    for site, part in (("a", "gpu"), ("b", "cpu"), ("c", "cpu"), ("d", "cpu")):
        prefers_paper = errors.prefer(site, part, "learned", "paper") is not None
        assert auto[(site, "paper")].startswith("preferred") is prefers_paper, (site, auto)
    assert auto[("a", "paper")] == (
        "preferred without a scheduler estimate: recent error 2 s vs learned 80 s"
    )
    assert auto[("a", "learned")] == "" and auto[("a", "scheduler")] == SCHEDULER_FIRST
    assert auto[("b", "learned")].startswith("preferred") and auto[("b", "paper")] == ""
    assert auto[("c", "learned")] == auto[("c", "paper")] == ""
    assert auto[("d", "paper")].startswith("preferred") and auto[("d", "learned")] == ""
    assert with_auto([]) == []


@pytest.fixture
async def ui(store: Store, tmp_path: Path) -> AsyncIterator[httpx2.AsyncClient]:
    """The dashboard's app over a client of the real daemon app (on a fresh store)."""
    async with in_process_client(build_app(daemon_state(store)), tmp_path / "home") as client:
        app = build_ui_app(client, token="s3cret", port=8790)
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:8790") as h:
            yield h


async def test_the_estimators_route_reads_the_daemon_with_the_token_only(
    ui: httpx2.AsyncClient,
) -> None:
    assert (await ui.get("/api/estimators")).status_code == 403
    assert (await ui.get("/api/estimators?token=s3cret")).status_code == 403
    wrong = await ui.get("/api/estimators", headers={"Host": "evil.example:8790"})
    assert wrong.status_code == 403
    got = await ui.get("/api/estimators", headers={"X-Fedhpc-Token": "s3cret"})
    assert got.status_code == 200 and got.headers["cache-control"] == "no-store"
    # No job judged yet on a fresh daemon: the page shows its empty state for this.
    assert got.json() == {"estimators": [], "min_samples": 3, "judged": []}


def test_judged_jobs_pair_each_jobs_realised_wait_with_every_estimators_prediction() -> None:
    """The queue history's points: one row per job (not per estimator), its realised wait and
    each estimator's prediction, the newest `recent` per partition, oldest first."""
    obs = [
        ErrorObservation("a", "gpu", m, p + i, 10.0 + i, NOW - timedelta(minutes=30 - i))
        for i in range(25)
        for m, p in (("learned", 100.0), ("paper", 5.0))
    ]
    obs.append(ErrorObservation("b", "cpu", "scheduler", 7.04, 3.06, NOW - timedelta(minutes=1)))
    rows = EstimatorErrors(obs, now=NOW, window_s=86400, recent=20).judged()
    a = [r for r in rows if r["site"] == "a"]
    assert len(a) == 20  # the newest 20 jobs, each once
    assert a[0] == {
        "site": "a",
        "partition": "gpu",
        "at": (NOW - timedelta(minutes=25)).isoformat(),
        "observed_s": 15.0,
        "predicted_s": {"learned": 105.0, "paper": 10.0},
    }
    assert [r["at"] for r in a] == sorted(r["at"] for r in a)
    b = [r for r in rows if r["site"] == "b"]
    assert b == [
        {
            "site": "b",
            "partition": "cpu",
            "at": (NOW - timedelta(minutes=1)).isoformat(),
            "observed_s": 3.1,
            "predicted_s": {"scheduler": 7.0},
        }
    ]
