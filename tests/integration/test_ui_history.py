"""The Federation page's queue history and allocation, in Debian's Chromium on a real daemon of
the four local-process sites: one partition's pending jobs and free GPUs at each probe the daemon
kept (a job made to wait shows up), and each site's accounts with the credit used and left as the
daemon reports them."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.ops.inspect import FederationView
from fedhpc.ops.task_views import ResultManifest
from fedhpc.ops.tasks import CancelRequest, GroupChild, ResultRequest, SubmitGroupRequest
from fedhpc.placement.credit import predict_charge
from fedhpc.profiles import load_profiles
from tests.integration.test_ui_views import BLOCKS, OVERLAPS, QUEUED
from tests.integration.ui_served import Dashboard, serve_dashboard
from tests.integration.ui_util import CHROMIUM, FLAGS, Troubles, need_browser

PARTITION = "devanvil/ai"  # QUEUED's partition: two GPUs, so a second 2-GPU job waits


@pytest.fixture
def dashboard(tmp_path: Path) -> Iterator[Dashboard]:
    yield from serve_dashboard(tmp_path)


def _series(page: Any) -> dict[str, Any]:
    raw = page.locator("#queue-history").get_attribute("data-series") or "{}"
    found: dict[str, Any] = json.loads(raw)
    return found


def _probes(dashboard: Dashboard, key: str) -> dict[str, tuple[int, int]]:
    """The daemon's kept probes of one partition: time -> (pending jobs, free GPUs)."""
    site, partition = key.split("/")

    async def read(client: DaemonClient) -> dict[str, Any]:
        return await client.history((site,), limit=240)

    hist = dashboard.client(read)
    out = {}
    for pt in hist["sites"][site]:
        for p in pt["partitions"]:
            if p["name"] == partition:
                out[pt["at"]] = (p["pending_jobs"], p["free_gpus"])
    return out


def test_the_queue_history_draws_the_daemons_probes_and_a_job_made_to_wait(
    dashboard: Dashboard,
) -> None:
    sync_playwright, expect = need_browser()

    async def two_for_one(client: DaemonClient) -> str:
        group = await client.submit_group(
            SubmitGroupRequest(
                objective="one waits for the other",
                children=tuple(GroupChild(command=("sleep", "300")) for _ in range(2)),
                envelope=QUEUED,
            )
        )
        return group.group_id

    async def cancel(client: DaemonClient) -> None:
        await client.cancel(CancelRequest(task_id=gid))

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        troubles = Troubles(page)
        page.goto(dashboard.url + "#/federation")
        page.wait_for_selector("#queue-history[data-series^='{']", timeout=30_000)
        # The default pick is a partition with GPUs; every offered partition can be picked.
        first = _series(page)
        options = page.locator("#qh-pick option").evaluate_all("(o) => o.map((x) => x.value)")
        assert PARTITION in options and first["key"] in options, (first, options)
        # What it draws is what the daemon kept: the newest probe's time and numbers.
        page.select_option("#qh-pick", PARTITION)
        drawn = _series(page)
        assert drawn["key"] == PARTITION and drawn["probes"] >= 1, drawn
        kept = _probes(dashboard, PARTITION)
        assert drawn["newest"]["at"] in kept, (drawn, kept)
        assert kept[drawn["newest"]["at"]] == (
            drawn["newest"]["pending"],
            drawn["newest"]["free"],
        ), (kept, drawn)
        assert drawn["newest"]["pending"] == 0  # nothing queued there yet

        # Two 2-GPU jobs for the 2-GPU partition: one runs, one waits; the next probes say so
        # and the chart follows (it redraws with each history read, every 15 s).
        gid = dashboard.client(two_for_one)
        try:
            expect(page.locator("#queue-history")).to_have_attribute(
                "data-series", _pending_at_least(1), timeout=60_000
            )
            drawn = _series(page)
            assert drawn["newest"]["free"] == 0, drawn  # the running one holds both GPUs
            assert page.locator("#qh-pick").input_value() == PARTITION  # the pick is kept
            laid = page.evaluate(OVERLAPS, BLOCKS)
            assert laid["found"] == [] and laid["scroll"] <= 1440, laid
        finally:
            dashboard.client(cancel)
        troubles.leave(browser.close)
    assert troubles.found == [], troubles.found


def _pending_at_least(n: int) -> re.Pattern[str]:
    return re.compile(r'"pending":\s*([' + str(n) + r"-9]|\d\d+)")


def _charge(m: ResultManifest) -> tuple[str, str, str, float, str]:
    """The live attempt's (site, account, state, worst-case charge) by the placement's rule."""
    a = next(x for x in reversed(m.attempts) if not x.superseded)
    assert a.shape is not None and a.account is not None, a
    profile = load_profiles()[a.site]
    spec = next(p for p in profile.partitions if p.name == a.partition)
    charge = predict_charge(profile, spec, a.shape)
    return a.site, a.account, a.state.value, charge.amount, charge.unit


def test_the_allocation_table_is_each_sites_credit_as_the_daemon_reports_it(
    dashboard: Dashboard,
) -> None:
    sync_playwright, expect = need_browser()

    async def read(client: DaemonClient) -> FederationView:
        return await client.federation()

    async def one_runs_one_waits(client: DaemonClient) -> tuple[str, list[ResultManifest]]:
        group = await client.submit_group(
            SubmitGroupRequest(
                objective="what live work will charge",
                children=tuple(GroupChild(command=("sleep", "300")) for _ in range(2)),
                envelope=QUEUED,
            )
        )
        with anyio.fail_after(120):
            while True:
                found = [
                    await client.get_result(ResultRequest(task_id=c.task_id, preview="none"))
                    for c in group.children
                ]
                now = sorted(m.attempts[-1].state.value for m in found if m.attempts)
                if now == ["pending", "running"]:
                    return group.group_id, found
                await anyio.sleep(1)

    async def cancel(client: DaemonClient) -> None:
        await client.cancel(CancelRequest(task_id=gid))

    gid, live = dashboard.client(one_runs_one_waits)

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        page = browser.new_page(viewport={"width": 390, "height": 844})
        troubles = Troubles(page)
        page.goto(dashboard.url + "#/federation")
        page.wait_for_selector("body[data-ready=federation]")
        view = dashboard.client(read)
        credit = [(s.site, c) for s in view.sites for c in s.credit]
        assert credit, "the process sites report no credit"
        rows = page.locator("#alloc-table tr.alloc-row")
        expect(rows).to_have_count(len(credit))
        for site, c in credit:
            row = page.locator(
                f"#alloc-table tr.alloc-row[data-site={site}][data-account='{c.account}']"
            )
            # Use grows as jobs run: a number in the site's unit, or "-" when not reported.
            used = row.locator("td.used")
            if c.used is None:
                expect(used).to_have_text("-")
            else:
                expect(used).to_have_text(_unit_number(c.unit))
            # Left is the domain's own `remaining` (budget minus use, or the site's balance).
            if c.remaining is None:
                expect(row.locator("td.left")).to_have_text("-")
            else:
                expect(row.locator("td.left")).to_have_text(_unit_number(c.unit, signed=True))
        # What the live work will charge at most: the running job's and the waiting one's
        # whole wall time at the partition's rate, on their site and account's row.
        charges = [_charge(m) for m in live]
        ((site, account),) = {(c[0], c[1]) for c in charges}  # one site, one account
        unit = charges[0][4]
        row = page.locator(f"#alloc-table tr.alloc-row[data-site={site}][data-account='{account}']")
        for column in ("running", "queued"):
            amount = sum(c[3] for c in charges if (c[2] == "running") == (column == "running"))
            assert amount > 0, charges
            expect(row.locator(f"td.{column}")).to_have_text(f"{amount:.2f} {unit}", timeout=60_000)
        expect(page.locator("#alloc-live")).to_have_text("at the daemon's live charges")
        # Credit over time: each site and account drawn over the daemon's probes, the newest
        # point one the daemon kept, with its numbers (used, and left as `remaining` counts).
        page.wait_for_selector("#credit-history[data-series]")
        drawn = json.loads(page.locator("#credit-history").get_attribute("data-series") or "{}")

        async def credit_history(client: DaemonClient) -> dict[str, Any]:
            return await client.history(limit=240, credit=True)

        kept = dashboard.client(credit_history)["sites"]
        assert set(drawn) == {f"{site} {c.account}" for site, c in credit}, drawn
        for key, d in drawn.items():
            site, account = key.split(" ", 1)
            probe = next(p for p in kept[site] if p["at"] == d["newest"]["at"])
            (c,) = [c for c in probe["credit"] if c["account"] == account]
            assert (d["newest"]["used"], d["newest"]["left"]) == (c["used"], c["remaining"])
            assert d["probes"] >= 1
        expect(page.locator("#ch-empty")).to_be_hidden()
        dashboard.client(cancel)
        # A phone: the table scrolls in its own box, nothing overlaps.
        laid = page.evaluate(OVERLAPS, BLOCKS)
        assert laid["found"] == [] and laid["scroll"] <= 390, laid
        troubles.leave(browser.close)
    assert troubles.found == [], troubles.found


def _unit_number(unit: str, *, signed: bool = False) -> re.Pattern[str]:
    return re.compile(("^-?" if signed else "^") + r"\d+\.\d\d " + re.escape(unit) + "$")


def test_an_expiring_allocation_is_drawn_against_its_even_pace_with_its_verdict(
    tmp_path: Path,
) -> None:
    """An account with an expiry in the config: the credit chart draws the even pace that
    spends what is left by its last day, and a line under it says when it runs out or what
    would be left unspent, as the daemon's history computes it."""
    sync_playwright, expect = need_browser()
    expires = (datetime.now(UTC) + timedelta(days=40)).date()
    home = tmp_path / "home"
    home.mkdir(parents=True)
    (home / "config.toml").write_text(
        "[sites.devanvil]\n"
        "[[sites.devanvil.accounts]]\n"
        'name = "fedhpc-cpu"\n'
        "budget = 100.0\n"
        "reserve = 10.0\n"
        f"expires = {expires.isoformat()}\n"
        "[[sites.devanvil.accounts]]\n"
        'name = "fedhpc-gpu"\n'
    )

    async def two_probes(client: DaemonClient) -> dict[str, Any]:
        await client.refresh()  # a second kept probe: a pace can be read
        with anyio.fail_after(60):
            while True:
                hist = await client.history(("devanvil",), limit=240, credit=True)
                if len(hist["sites"]["devanvil"]) >= 2:
                    return hist
                await anyio.sleep(0.5)

    for dashboard in serve_dashboard(tmp_path):
        hist = dashboard.client(two_probes)
        burn = hist["burn"]["devanvil"]
        assert set(burn) == {"fedhpc-cpu"}, burn  # the account without an expiry has none
        verdict = burn["fedhpc-cpu"]["verdict"]
        assert burn["fedhpc-cpu"]["left"] == pytest.approx(90.0)  # nothing ran: 100 - reserve
        assert "would be left unspent on " + expires.isoformat() in verdict, verdict
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            troubles = Troubles(page)
            page.goto(dashboard.url + "#/federation")
            page.wait_for_selector("body[data-ready=federation]")
            row = page.locator("#ch-burn li[data-site=devanvil][data-account=fedhpc-cpu]")
            expect(row).to_contain_text(f"expires {expires.isoformat()}", timeout=90_000)
            expect(row).to_contain_text(verdict)
            expect(page.locator("#ch-burn li")).to_have_count(1)
            page.wait_for_selector("#credit-history[data-series]")
            raw = page.locator("#credit-history").get_attribute("data-series") or "{}"
            drawn = json.loads(raw)["devanvil fedhpc-cpu"]
            assert drawn["burn"] == verdict
            # The even pace ends at the newest credit left; over the probes shown it is flat
            # to within a 40-day pace (90 SU over 40 days is ~2.25 SU a day).
            start, end = drawn["even"]
            assert end["y"] == pytest.approx(drawn["newest"]["left"])
            assert start["y"] >= end["y"]
            troubles.leave(browser.close)
        assert troubles.found == [], troubles.found
