"""The Federation page's scatter merges probes that saw the same numbers into one point whose
area grows with their count: in Debian's Chromium on a real daemon of the four local-process
sites, 120 probes per site landing on two or three points are all accounted for, each point
drawn once where its numbers are, labelled with its count on hover (and kept at its size
there), and the count said in words under the chart."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from fedhpc.client.daemon_client import DaemonClient
from tests.integration.ui_served import Dashboard, serve_dashboard
from tests.integration.ui_util import CHROMIUM, FLAGS, Troubles, need_browser

PROBES = 120  # what the page asks per site (/api/history?limit=120)
# Per site, how its 120 probes split over the points they land on: (free GPUs, pending) -> n.
SPLITS = ((70, 40, 10), (100, 20), (61, 59), (1, 119))

# What the chart holds and draws: per site dataset, each point's numbers, count and radius
# (at rest), and the median marker.
DRAWN = """(() => {
  const out = {};
  state.chart.data.datasets.forEach((d, i) => {
    const meta = state.chart.getDatasetMeta(i);
    out[d.label] = d.data.map((p, j) => ({ x: p.x, y: p.y, probes: p.probes ?? null,
      radius: meta.data[j].options.radius, at: [meta.data[j].x, meta.data[j].y] }));
  });
  return out;
})()"""

# Hover a point as a person would (the pointer at its centre): what the tooltip says and the
# point's radius while hovered.
HOVERED = """() => ({
  lines: (state.chart.tooltip.body || []).flatMap((b) => b.lines),
  active: state.chart.getActiveElements().map((a) => ({
    label: state.chart.data.datasets[a.datasetIndex].label,
    index: a.index, radius: a.element.options.radius })),
})"""


@pytest.fixture
def dashboard(tmp_path: Path) -> Iterator[Dashboard]:
    yield from serve_dashboard(tmp_path)


def _history(dashboard: Dashboard) -> tuple[dict[str, Any], dict[str, Counter[tuple[int, int]]]]:
    """120 probes per site as the daemon answers them, on the sites' real partitions: each
    site's first offered GPU partition set to its split's numbers, its other partitions empty.
    Returns the answer and, per site, the points it must draw with their counts."""

    async def read(client: DaemonClient) -> tuple[dict[str, Any], dict[str, list[str]]]:
        hist = await client.history(limit=1)
        view = await client.federation()
        offered = {s.site: [p.name for p in s.partitions if p.total_gpus > 0] for s in view.sites}
        return hist, offered

    hist, offered = dashboard.client(read)
    t0 = datetime(2026, 12, 6, 1, 0, tzinfo=UTC)
    sites: dict[str, list[dict[str, Any]]] = {}
    want: dict[str, Counter[tuple[int, int]]] = {}
    for k, (site, points) in enumerate(sorted(hist["sites"].items())):
        (last,) = points
        gpu = offered[site][0]
        split = SPLITS[k % len(SPLITS)]
        numbers = [(10 * k + j, 3 * j + k + 1) for j, n in enumerate(split) for _ in range(n)]
        numbers.sort(key=lambda xy: (xy[0] * 7 + xy[1] * 13) % 17)  # interleaved in time
        assert len(numbers) == PROBES
        sites[site] = []
        for i, (free, pending) in enumerate(numbers):
            parts = []
            for p in last["partitions"]:
                mine = p["name"] == gpu
                parts.append(
                    {
                        **p,
                        "free_gpus": free if mine else 0,
                        "pending_jobs": pending if mine else 0,
                        "total_gpus": max(p["total_gpus"], free) if mine else p["total_gpus"],
                    }
                )
            at = (t0 + timedelta(seconds=5 * i)).isoformat()
            sites[site].append({**last, "at": at, "partitions": parts})
        want[site] = Counter(numbers)
    return {"sites": sites, "limit": PROBES}, want


def test_merged_probes_are_drawn_once_each_with_their_count(dashboard: Dashboard) -> None:
    sync_playwright, expect = need_browser()
    answer, want = _history(dashboard)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        troubles = Troubles(page)
        # The page's history read answers these probes (the rest is the real daemon's).
        page.route(
            "**/api/history?*",
            lambda route: route.fulfill(
                status=200, content_type="application/json", body=json.dumps(answer)
            ),
        )
        page.goto(dashboard.url + "#/federation")
        page.wait_for_selector("#scatter[data-newest]", timeout=30_000)
        expect(page.locator("tr.site-row")).to_have_count(4, timeout=20_000)
        page.wait_for_timeout(300)
        drawn = page.evaluate(DRAWN)

        # Every probe accounted for: each site's points, once each, with their counts.
        for site, points in want.items():
            got = drawn[site]
            assert {(p["x"], p["y"]): p["probes"] for p in got} == dict(points), (site, got)
            assert len(got) == len(points) and sum(p["probes"] for p in got) == PROBES, got
            # The more probes, the larger the point (its area grows with the count).
            by_count = sorted(got, key=lambda p: p["probes"])
            radii = [p["radius"] for p in by_count]
            assert radii == sorted(radii) and radii[0] < radii[-1], by_count
            # The median marker: the median of all 120 probes, not of the merged points.
            xs = sorted(x for (x, _), n in points.items() for _ in range(n))
            ys = sorted(y for (_, y), n in points.items() for _ in range(n))
            (median,) = drawn[f"{site} median"]
            assert (median["x"], median["y"]) == (
                (xs[59] + xs[60]) / 2,
                (ys[59] + ys[60]) / 2,
            ), (site, median)

        # Said in words under the chart: each site's probes and the points they make.
        note = page.locator("#scatter-note")
        for site, points in want.items():
            expect(note).to_contain_text(f"{site} {PROBES} probes as {len(points)} points")

        # Hovered, a merged point says its numbers and its count, and keeps its size.
        canvas = page.locator("#scatter").bounding_box()
        assert canvas is not None
        site = sorted(want)[0]
        biggest = max(drawn[site], key=lambda p: p["probes"])
        page.mouse.move(canvas["x"] + biggest["at"][0], canvas["y"] + biggest["at"][1])
        page.wait_for_timeout(200)
        hovered = page.evaluate(HOVERED)
        line = (
            f"{site}: {biggest['x']} free GPUs, {biggest['y']} pending ({biggest['probes']} probes)"
        )
        assert line in hovered["lines"], hovered
        mine = [a for a in hovered["active"] if a["label"] == site]
        assert mine and mine[0]["radius"] >= biggest["radius"], (biggest, hovered)
        troubles.leave(browser.close)
    assert troubles.found == [], troubles.found
