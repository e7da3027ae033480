"""The Federation page's "wait fedhpc would predict now", in Debian's Chromium on a real daemon of
the four local-process sites (no Slurm): per partition, the daemon's own outlook for 1 GPU,
1 node and 4 GPUs, "cannot run" where the rules say so, the picked partition's line beside the
queue history, its time in the page's stated zone; and `fedhpc status` with the same."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fedhpc.client.daemon_client import DaemonClient
from tests.integration.test_ui_views import BLOCKS, OVERLAPS
from tests.integration.ui_served import FEDHPC, Dashboard, serve_dashboard
from tests.integration.ui_util import CHROMIUM, FLAGS, Troubles, need_browser


@pytest.fixture
def dashboard(tmp_path: Path) -> Iterator[Dashboard]:
    yield from serve_dashboard(tmp_path)


def _drawn(page: Any) -> dict[tuple[str, str], str]:
    """Each drawn cell: (site/partition, request) -> its text."""
    cells: list[list[str]] = page.eval_on_selector_all(
        "#outlook-table td.outlook",
        "(tds) => tds.map((td) =>"
        " [td.closest('tr').dataset.key, td.dataset.request, td.textContent])",
    )
    return {(k, q): text for k, q, text in cells}


def _duration(seconds: float) -> str:
    """The page's `duration` (app.js)."""
    s = max(0, round(seconds))
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {(s % 3600) // 60} min"


def test_the_wait_predicted_now_is_the_daemons_for_each_partition_and_request(
    dashboard: Dashboard,
) -> None:
    sync_playwright, expect = need_browser()

    async def read(client: DaemonClient) -> dict[str, Any]:
        return await client.outlook()

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        troubles = Troubles(page)
        page.goto(dashboard.url + "#/federation")
        page.wait_for_selector("#outlook-table tr.outlook-row", timeout=30_000)
        page.wait_for_selector("#queue-history[data-series^='{']", timeout=30_000)
        ours = dashboard.client(read)
        drawn = _drawn(page)
        offered = set(page.locator("#qh-pick option").evaluate_all("(o) => o.map((x) => x.value)"))
        assert {k for k, _ in drawn} == offered  # every partition the queue history offers
        cannot = 0
        for r in ours["rows"]:
            key = f"{r['site']}/{r['partition']}"
            if key not in offered:
                continue
            text = drawn[(key, r["request"])]
            if r["wait_s"] is None:
                cannot += 1
                assert text == "cannot run", (key, r, text)
                title = page.locator(
                    f"#outlook-table tr[data-key='{key}'] td[data-request='{r['request']}']"
                ).get_attribute("title")
                assert title == r["why"]
            else:  # the daemon's wait, in the page's words, and the estimator it came from
                assert r["method"] in {"scheduler", "learned", "paper"}, r
                assert text == f"{_duration(r['wait_s'])} ({r['method']})", (key, r, text)
        # devvista's nodes have one GPU: 4 GPUs cannot run there (the rules' reason on hover).
        assert cannot > 0 and drawn[("devvista/gh", "4 GPUs")] == "cannot run", drawn
        # The picked partition's row is marked, and its line beside the queue history says
        # the same, with the time in the stated zone (UTC by default).
        picked = page.locator("#qh-pick").input_value()
        assert page.locator("#outlook-table tr.selected").get_attribute("data-key") == picked
        line = page.locator("#qh-now").text_content() or ""
        assert line.startswith(f"Now, for {picked}: 1 GPU "), line
        assert re.search(r"\(as of \d\d:\d\d:\d\d UTC\)$", line), line
        at = page.locator("#outlook-at").text_content() or ""
        assert re.fullmatch(r"as of \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", at), at
        # A row picks its partition's queue history, and is marked.
        page.click("#outlook-table tr[data-key='devvista/gh'] td >> nth=0")
        assert page.locator("#qh-pick").input_value() == "devvista/gh"
        expect(page.locator("#queue-history")).to_have_attribute(
            "data-series", re.compile(r'"key":"devvista/gh"')
        )
        assert page.locator("#outlook-table tr.selected").get_attribute("data-key") == "devvista/gh"
        assert (page.locator("#qh-now").text_content() or "").startswith("Now, for devvista/gh:")
        page.select_option("#tz", "local")
        expect(page.locator("#outlook-at")).to_have_text(
            re.compile(r"as of .* UTC[+-]\d\d:\d\d$"), timeout=20_000
        )
        laid = page.evaluate(OVERLAPS, BLOCKS)
        assert laid["found"] == [] and laid["scroll"] <= 1440, laid
        troubles.leave(browser.close)
    assert troubles.found == [], troubles.found


def test_status_prints_the_wait_predicted_now_and_its_json_carries_the_daemons_answer(
    dashboard: Dashboard,
) -> None:
    async def read(client: DaemonClient) -> dict[str, Any]:
        return await client.outlook()

    ours = dashboard.client(read)
    run = subprocess.run(
        [*FEDHPC, "status", "--json"],
        env=dashboard.env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)["outlook"]
    assert got["requests"] == ours["requests"] == ["1 GPU", "1 node", "4 GPUs"]
    cells = {(r["site"], r["partition"], r["request"]) for r in got["rows"]}
    assert cells == {(r["site"], r["partition"], r["request"]) for r in ours["rows"]}
    assert ("devvista", "gh", "4 GPUs") in cells
    text = subprocess.run(
        [*FEDHPC, "status"], env=dashboard.env, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    start = next(i for i, line in enumerate(text) if line.startswith("Wait fedhpc would predict"))
    assert text[start + 1].split()[:2] == ["SITE", "PARTITION"]
    gh = next(line for line in text[start:] if line.split()[:2] == ["devvista", "gh"])
    assert gh.split()[2:4] == ["10s", "paper"]  # idle: a free slot now, as placement says
    assert gh.split()[-2:] == ["cannot", "run"]  # one GPU per node: no 4-GPU job there
    shown = sum(len(s["partitions"]) for s in json.loads(run.stdout)["sites"])
    mine = text[start : start + 2 + shown]  # the title, the header, a row per partition shown
    assert len({tuple(line.split()[:2]) for line in mine[2:]}) == shown, mine
    assert max(len(line) for line in mine) <= 100, mine
