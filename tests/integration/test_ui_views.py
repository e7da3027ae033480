"""What the dashboard draws is true, in Debian's Chromium on a real daemon of the four
local-process sites: each attempt's queue wait drawn apart from its run, every time in one
stated time zone (UTC, or the browser's own when asked), a selected bar keeping its colour,
tooltips in the page's font inside the screen, health `ok` in green, no two boxes overlapping
at 390 and 1440 px, event subjects as links, and a 5,000-child group counted whole."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.domain import ResourceEnvelope
from fedhpc.domain.job import JobState
from fedhpc.ops.task_views import ResultManifest
from fedhpc.ops.tasks import CancelRequest, GroupChild, ResultRequest, SubmitGroupRequest
from fedhpc.ui.data import MAX_CHILDREN, group_manifests
from fedhpc.ui.timeline import bar_json, bars
from tests.integration.daemon_util import wait_terminal
from tests.integration.mcp_support import stdio_params
from tests.integration.ui_served import FEDHPC, Dashboard, serve_dashboard
from tests.integration.ui_util import CHROMIUM, FLAGS, need_browser

# Two GPUs each on devanvil's 2-GPU partition: one runs while the others wait in its queue.
QUEUED = ResourceEnvelope.model_validate(
    {
        "gpus": {"min": 2, "max": 2},
        "cpus": {"min": 1, "max": 1},
        "wall_time": {"min": "5m"},
        "sites_include": ["devanvil"],
    }
)
# Two GPUs per node on devvista, whose nodes have one: every child is unschedulable at once.
NOWHERE = QUEUED.model_copy(update={"sites_include": ("devvista",)})
KOLKATA = timedelta(hours=5, minutes=30)  # the browser's zone here: never UTC's hour or minute
RUNNING = "rgb(255, 241, 194)"  # the running colour (and vis-timeline's own selection yellow)
VIS_SELECTED = "rgb(255, 247, 133)"

# Every block a person reads (nested ones are compared with their container only if neither
# holds the other): two must never intersect.
BLOCKS = (
    "header h1, nav a, #status, .tz, #banner, main h2, main h3, main p, main .scroll, "
    "main .chart, #timeline, main pre"
)
OVERLAPS = """(sel) => {
  const name = (e) => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") +
    (typeof e.className === "string" && e.className ? "." + e.className.split(" ").join(".") : "");
  const shown = (b) => b.r.width > 0 && b.r.height > 0 &&
    getComputedStyle(b.e).visibility !== "hidden";
  const boxes = [...document.querySelectorAll(sel)]
    .map((e) => ({ e, r: e.getBoundingClientRect() })).filter(shown);
  const found = [];
  for (let i = 0; i < boxes.length; i++) {
    for (let j = i + 1; j < boxes.length; j++) {
      const [a, b] = [boxes[i], boxes[j]];
      if (a.e.contains(b.e) || b.e.contains(a.e)) continue;
      const w = Math.min(a.r.right, b.r.right) - Math.max(a.r.left, b.r.left);
      const h = Math.min(a.r.bottom, b.r.bottom) - Math.max(a.r.top, b.r.top);
      if (w > 1 && h > 1) found.push(`${name(a.e)} x ${name(b.e)}`);
    }
  }
  const outside = boxes.filter((b) => b.r.left < -1 || b.r.right > innerWidth + 1)
    .map((b) => name(b.e));
  return { found, outside, scroll: document.documentElement.scrollWidth, width: innerWidth };
}"""

# The scatter's legend: each site's entry and where Chart.js put it.
LEGEND = """(() => {
  const l = state.chart.legend;
  const items = l.legendItems.map((i, k) => ({ text: i.text, box: l.legendHitBoxes[k] }));
  return { width: state.chart.width, items };
})()"""


@pytest.fixture
def dashboard(tmp_path: Path) -> Iterator[Dashboard]:
    yield from serve_dashboard(tmp_path)


def _queued_group(dashboard: Dashboard) -> tuple[str, list[dict[str, Any]]]:
    """Three children that queue behind each other, finished: (group id, their bars)."""

    async def run(client: DaemonClient) -> tuple[str, list[dict[str, Any]]]:
        group = await client.submit_group(
            SubmitGroupRequest(
                objective="three in one queue",
                children=tuple(
                    GroupChild(command=("sh", "-c", f"sleep 3; echo q{i} ran"), name=f"q{i}")
                    for i in range(3)
                ),
                envelope=QUEUED,
            )
        )
        for child in group.children:
            await wait_terminal(client, child.task_id, limit=150)
        _, found, _ = await group_manifests(client, group.group_id)
        return group.group_id, [bar_json(b) for b in bars(found)]

    return dashboard.client(run, limit=240)


def _at(iso: str) -> datetime:
    return datetime.fromisoformat(iso)


def _share_waited(bar: dict[str, Any]) -> float:
    t0, t1 = _at(bar["submitted"]), _at(bar["ended"])
    waited = (_at(bar["started"]) if bar["started"] else t1) - t0
    return waited / (t1 - t0)


def _shown(t: datetime, zone: str, offset: timedelta = timedelta(0)) -> str:
    return f"{(t.astimezone(UTC) + offset):%Y-%m-%d %H:%M:%S} {zone}"


def _axis_minutes(page: Any) -> list[str]:
    """The Gantt's date labels (`4 December 20:43 UTC`): their `HH:MM zone`."""
    labels = page.locator(
        ".vis-time-axis.vis-foreground .vis-text.vis-major:not(.vis-measure)"
    ).evaluate_all("(ls) => ls.map((l) => l.textContent)")
    return [m.group(1) for t in labels if (m := re.search(r"(\d\d:\d\d \S+)$", t.strip()))]


def _window(page: Any) -> tuple[datetime, datetime]:
    start, end = page.evaluate(
        "(() => { const w = state.timeline.getWindow();"
        " return [w.start.getTime(), w.end.getTime()]; })()"
    )
    return datetime.fromtimestamp(start / 1000, UTC), datetime.fromtimestamp(end / 1000, UTC)


def _looks(item: Any) -> dict[str, str]:
    looks: dict[str, str] = item.evaluate(
        "(e) => { const s = getComputedStyle(e); return { color: s.backgroundColor, "
        "image: s.backgroundImage, size: s.backgroundSize, border: s.borderTopColor }; }"
    )
    return looks


def _looks_again(item: Any, before: dict[str, str], within_s: float = 10.0) -> dict[str, str]:
    """`item`'s looks once they are `before` again, else the last seen after `within_s`: the
    live page redraws its bars (a refresh lands), and a bar caught mid-redraw has no style
    (empty strings, seen under a loaded machine)."""
    deadline = time.monotonic() + within_s
    while (now := _looks(item)) != before and time.monotonic() < deadline:
        time.sleep(0.1)
    return now


# Where the tooltip stands against the bars: each bar's box and, at its centre, whether the
# element a person sees there (hit-testing the tooltip too, as if it took the pointer) is the bar.
COVERED = """(tip) => {
  const t = tip.getBoundingClientRect();
  const was = tip.style.pointerEvents;
  tip.style.pointerEvents = "auto";  // hit-test what is drawn on top, the tooltip included
  const bars = [...document.querySelectorAll(".vis-item.attempt")].map((e) => {
    const r = e.getBoundingClientRect();
    const x = r.left + Math.min(r.width / 2, 30), y = r.top + r.height / 2;
    const top = document.elementFromPoint(x, y);
    const w = Math.min(r.right, t.right) - Math.max(r.left, t.left);
    const h = Math.min(r.bottom, t.bottom) - Math.max(r.top, t.top);
    return { id: e.dataset.task + "#" + e.dataset.n, top: r.top, bottom: r.bottom,
             seen: !!top && e.contains(top), overlap: w > 0 && h > 0 };
  });
  tip.style.pointerEvents = was;
  return { tip: { top: t.top, bottom: t.bottom, left: t.left, right: t.right },
           events: getComputedStyle(tip).pointerEvents, bars };
}"""


def _hover_top_bar_and_see_below(page: Any, expect: Any) -> None:
    """Hover the Gantt's topmost bar (with others stacked below it): the tooltip shows, takes
    no pointer, and covers neither the hovered bar nor any bar below it. vis-timeline's own
    tooltip was capped inside the Gantt's box, over the very rows below the pointer."""
    page.mouse.move(0, 0)
    items = page.locator(".vis-item.attempt").all()
    top = min(items, key=lambda i: (i.bounding_box() or {"y": 1e9})["y"])
    top.scroll_into_view_if_needed()
    page.wait_for_timeout(200)  # a scroll hides the tooltip: done before the pointer moves
    boxes = [(i, i.bounding_box()) for i in items]
    hovered, bar = min(((i, b) for i, b in boxes if b is not None), key=lambda ib: ib[1]["y"])
    below = [b for _, b in boxes if b is not None and b["y"] >= bar["y"] + bar["height"] - 1]
    assert below, boxes  # there are rows below the hovered one to keep in sight
    page.mouse.move(bar["x"] + min(bar["width"] / 2, 30), bar["y"] + bar["height"] / 2)
    tip = page.locator("#tip")
    expect(tip).to_be_visible()
    got = page.evaluate(COVERED, tip.element_handle())
    assert got["events"] == "none", got
    key = f"{hovered.get_attribute('data-task')}#{hovered.get_attribute('data-n')}"
    for b in got["bars"]:
        if b["top"] >= bar["y"] - 1:  # the hovered bar and every bar below it
            assert not b["overlap"] and b["seen"], (key, got)


def test_queue_wait_and_run_are_drawn_apart_in_one_stated_time_zone(dashboard: Dashboard) -> None:
    sync_playwright, expect = need_browser()
    gid, truth = _queued_group(dashboard)
    assert len(truth) == 3, truth
    assert max(_share_waited(b) for b in truth) > 0.3, truth  # one waited for another's run
    errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        context = browser.new_context(
            viewport={"width": 1440, "height": 900}, timezone_id="Asia/Kolkata"
        )
        page = context.new_page()
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.goto(f"{dashboard.url}#/tasks/group/{gid}")
        page.wait_for_selector("#timeline[data-attempts='3']", timeout=20_000)

        # Each bar: its waiting share drawn pale and dotted, its run in its state's colour.
        for b in truth:
            item = page.locator(f".vis-item.attempt[data-task='{b['task_id']}'][data-n='{b['n']}']")
            expect(item).to_have_count(1)
            share = _share_waited(b)
            assert float(item.get_attribute("data-wait") or "nan") == pytest.approx(
                share, abs=0.002
            ), b
            # The run's colour covers the bar's right (1 - share): the first background layer.
            looks = _looks(item)
            run_width = float(re.match(r"(?:calc\()?([\d.]+)%", looks["size"]).group(1))  # type: ignore[union-attr]
            assert run_width == pytest.approx(100 * (1 - share), abs=0.3), (looks, b)
            assert looks["image"].startswith("linear-gradient(rgb(201, 236, 211)"), looks  # done
            assert "radial-gradient" in looks["image"], looks  # the dotted queue wait beneath

        # One zone, named everywhere: UTC by default, though the browser's zone is +05:30.
        assert page.evaluate("document.body.dataset.tz") == "utc"
        expect(page.locator("#status")).to_have_text(
            re.compile(r"live · updated \d\d:\d\d:\d\d UTC$")
        )
        expect(page.locator(".legend .zone")).to_have_text("UTC")
        start, end = _window(page)
        minutes = _axis_minutes(page)
        assert minutes, page.locator(".vis-time-axis.vis-foreground").text_content()
        in_utc = {
            f"{start + timedelta(minutes=m):%H:%M} UTC"
            for m in range(-1, 2 + int((end - start).total_seconds() // 60))
        }
        assert set(minutes) <= in_utc, (minutes, start, end)

        waited = max(truth, key=_share_waited)
        item = page.locator(
            f".vis-item.attempt[data-task='{waited['task_id']}'][data-n='{waited['n']}']"
        )
        item.hover()
        tip = page.locator("#tip")
        expect(tip).to_contain_text("in the queue")
        expect(tip).to_contain_text(f"submitted {_shown(_at(waited['submitted']), 'UTC')}")
        # In the page's font (it was verdana, a serif where verdana is missing), on screen.
        fonts = page.evaluate(
            "[getComputedStyle(document.body).fontFamily, "
            "getComputedStyle(document.querySelector('#tip')).fontFamily]"
        )
        assert fonts[0] == fonts[1], fonts
        box = tip.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 1440, box
        # A live refresh changes the bars in place: the element a pointer is on stays the same.
        page.evaluate("window.kept = document.querySelector('.vis-item.attempt')")
        reads = int(page.get_attribute("#timeline", "data-reads") or "0")
        expect(page.locator("#timeline")).not_to_have_attribute("data-reads", str(reads))
        assert page.evaluate("window.kept.isConnected"), "a refresh redrew the bars"

        # The top bar of the three stacked ones: its tooltip hides neither it nor the two below.
        _hover_top_bar_and_see_below(page, expect)

        # Selected: outlined, its colours kept (it turned the yellow of a running attempt).
        before = _looks(item)
        item.click()
        expect(item).to_have_class(re.compile(r"\bvis-selected\b"))
        after = _looks_again(item, before)
        assert after == before, (before, after)
        assert RUNNING not in after.values() and VIS_SELECTED not in after.values(), after
        detail = page.locator("#attempt-detail")
        expect(detail).to_contain_text("in the queue, ran")
        expect(detail).to_contain_text(f"started {_shown(_at(waited['started']), 'UTC')}")

        # The person's own zone, when asked: named as its offset, the axis following.
        page.select_option("#tz", "local")
        assert page.evaluate("document.body.dataset.tz") == "local"
        expect(page.locator("#status")).to_have_text(re.compile(r"\d\d:\d\d:\d\d UTC\+05:30$"))
        expect(page.locator(".legend .zone")).to_have_text("UTC+05:30")
        page.wait_for_timeout(500)
        minutes = _axis_minutes(page)
        in_kolkata = {
            m.replace(" UTC", " UTC+05:30")
            for m in {
                f"{start + KOLKATA + timedelta(minutes=m):%H:%M} UTC"
                for m in range(-1, 2 + int((end - start).total_seconds() // 60))
            }
        }
        assert minutes and set(minutes) <= in_kolkata, (minutes, start)
        item.click()
        started = _shown(_at(waited["started"]), "UTC+05:30", KOLKATA)
        expect(detail).to_contain_text(f"started {started}")

        # Events: times in the chosen zone, and each subject a link to its timeline.
        page.goto(f"{dashboard.url}#/events")
        page.wait_for_selector("body[data-ready=events]")
        row = page.locator("#events tr[data-kind='group.round_terminal']")
        expect(row).to_have_count(1, timeout=20_000)
        expect(row.locator("td").nth(1)).to_have_text(re.compile(r" UTC\+05:30$"))
        row.locator("td.subject a").click()
        page.wait_for_selector("body[data-ready=tasks]")
        expect(page.locator("#tl-title")).to_have_text(f"Group {gid}: three in one queue")
        page.reload()  # the zone is the person's choice: kept
        page.wait_for_selector("body[data-ready=tasks]")
        assert page.evaluate("document.body.dataset.tz") == "local"
        browser.close()
    assert errors == [], errors


def test_a_task_page_shows_what_fedhpc_task_shows(dashboard: Dashboard) -> None:
    """A task's page: each attempt's wait, run and exit code, the placement's why, its outputs
    by reference, and (asked for, read once from the site) the output's tail; the task list
    filtered by state and by text."""
    sync_playwright, expect = need_browser()
    gid, truth = _queued_group(dashboard)
    task_id = max(truth, key=_share_waited)["task_id"]

    async def read(client: DaemonClient) -> ResultManifest:
        return await client.get_result(ResultRequest(task_id=task_id, preview="none"))

    m = dashboard.client(read)
    (attempt,) = m.attempts
    assert attempt.wait_s is not None and attempt.runtime_s is not None, attempt
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.goto(f"{dashboard.url}#/tasks/task/{task_id}")
        page.wait_for_selector("#timeline[data-attempts='1']", timeout=20_000)
        row = page.locator("#attempts tbody tr[data-n='1']")
        expect(row.locator("td").nth(4)).to_have_text("completed")
        expect(row.locator("td.waited")).to_have_text(f"{round(attempt.wait_s)} s")
        expect(row.locator("td.ran")).to_have_text(f"{round(attempt.runtime_s)} s")
        expect(row.locator("td").nth(7)).to_have_text("0")
        assert m.provenance is not None
        expect(page.locator("#task-facts")).to_contain_text(f"placement: {m.provenance.decision}")
        expect(page.locator("#outputs tbody tr")).to_have_count(len(m.outputs))
        page.click("#read-output")
        name = next(c["name"] for c in truth if c["task_id"] == task_id)
        expect(page.locator("#output-tail")).to_contain_text(f"{name} ran")
        # The list: only completed tasks, then only those whose id or name holds "q1".
        page.select_option("#task-state", "completed")
        expect(page.locator("#task-list tbody tr")).to_have_count(3)
        page.fill("#task-find", "q1")
        expect(page.locator("#task-list tbody tr")).to_have_count(1)
        expect(page.locator("#task-list tbody tr")).to_contain_text("(q1)")
        page.select_option("#task-state", "failed")
        expect(page.locator("#task-list tbody tr")).to_have_count(0)
        expect(page.locator(f"#group-list tr[data-group='{gid}']")).to_have_count(1)
        browser.close()


def test_every_page_fits_a_phone_and_a_desktop(dashboard: Dashboard, tmp_path: Path) -> None:
    """390 px (a phone) and 1440 px: no two boxes a person reads intersect, nothing is wider
    than the screen, the Gantt takes the width, the scatter's legend names every site whole;
    health `ok` is green; a tooltip at the right edge stays on screen."""
    sync_playwright, expect = need_browser()
    gid, truth = _queued_group(dashboard)
    errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        for width in (390, 1440):
            page = browser.new_page(viewport={"width": width, "height": 844})
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(dashboard.url)
            page.wait_for_selector("body[data-ready=federation]")
            expect(page.locator("tr.site-row")).to_have_count(4, timeout=20_000)
            page.wait_for_selector("#scatter[data-newest]")
            healthy = page.locator("tr.site-row td.health span")
            assert healthy.all_inner_texts() == ["ok"] * 4
            assert set(healthy.evaluate_all("(s) => s.map((e) => getComputedStyle(e).color)")) == {
                "rgb(19, 115, 51)"
            }
            legend = page.evaluate(LEGEND)
            names = [i["text"] for i in legend["items"]]
            assert names == ["devanvil", "devdelta", "devdeltaai", "devvista"], legend
            for i in legend["items"]:  # inside the chart: a name cut at its edge read "devd"
                box = i["box"]
                assert box["left"] >= 0 and box["left"] + box["width"] <= legend["width"], legend
            pages = [("federation", "body[data-ready=federation]")]
            pages += [(f"tasks/group/{gid}", "#timeline[data-attempts='3']")]
            pages += [(f"tasks/task/{truth[0]['task_id']}", "#attempts tbody tr")]
            pages += [("events", "#events tr[data-kind='group.round_terminal']")]
            for name, ready in pages:
                page.evaluate(f"location.hash = '#/{name}'")
                page.wait_for_selector(ready, timeout=20_000)
                page.wait_for_timeout(300)
                got = page.evaluate(OVERLAPS, BLOCKS)
                page.screenshot(
                    path=str(tmp_path / f"{name.split('/')[1 if '/' in name else 0]}-{width}.png"),
                    full_page=True,
                )
                assert got["found"] == [] and got["outside"] == [], (width, name, got)
                assert got["scroll"] <= got["width"], (width, name, got)
                if name.startswith("tasks/group"):
                    # Drawn: vis-timeline kept its root hidden (a blank white box) when made
                    # with a window that never changed afterwards.
                    assert (
                        page.evaluate(
                            "getComputedStyle(document.querySelector('#timeline .vis-timeline'))"
                            ".visibility"
                        )
                        == "visible"
                    ), (width, name)
                    shown = page.locator("#timeline").bounding_box()
                    # The whole width on a phone (it was ~100 px), most of it on a desktop.
                    least = 0.85 * width - 40 if width < 700 else 0.55 * width
                    assert shown is not None and shown["width"] >= least, (width, shown)
                    # The bar nearest the right edge: its tooltip stays on the screen.
                    items = page.locator(".vis-item.attempt")
                    right = max(items.all(), key=lambda i: (i.bounding_box() or {"x": 0})["x"])
                    bar = right.bounding_box()
                    assert bar is not None
                    page.mouse.move(min(bar["x"] + bar["width"] - 2, width - 4), bar["y"] + 4)
                    tip = page.locator("#tip")
                    expect(tip).to_be_visible()
                    box = tip.bounding_box()
                    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width, (
                        box
                    )
                    _hover_top_bar_and_see_below(page, expect)
            page.close()
        browser.close()
    assert errors == [], errors


def test_a_5000_child_group_is_counted_whole(dashboard: Dashboard) -> None:
    """The group list counted children from the newest 200 tasks: a 5,000-child sweep read
    "children 200". Its counts are now the daemon's, over every child."""
    sync_playwright, expect = need_browser()

    async def submit(client: DaemonClient) -> str:
        group = await client.submit_group(
            SubmitGroupRequest(
                objective="five thousand that fit nowhere",
                children=tuple(GroupChild(command=("true",)) for _ in range(5000)),
                envelope=NOWHERE,
            )
        )
        return group.group_id

    async def counts(client: DaemonClient) -> dict[str, int]:
        return (await client.group(gid, limit=1)).counts

    async def pages(client: DaemonClient) -> tuple[str, str]:
        view = await client.group(gid, limit=MAX_CHILDREN + 1)
        return view.children[0].task_id, view.children[MAX_CHILDREN].task_id

    gid = dashboard.client(submit)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.goto(f"{dashboard.url}#/tasks")
        page.wait_for_selector("body[data-ready=tasks]")
        row = page.locator(f"#group-list tr[data-group='{gid}']")
        size, counted = row.locator("td").nth(1), row.locator("td").nth(2)
        expect(size).to_have_text("5000", timeout=20_000)
        states = counted.inner_text()
        assert sum(int(n) for n in re.findall(r"\d+", states)) == 5000, states
        # Once placement has judged every child, the page's counts are the daemon's own.
        expect(counted).to_have_text("unschedulable 5000", timeout=120_000)
        assert dashboard.client(counts) == {"unschedulable": 5000}
        # The task list says the whole count (it said "the newest 200").
        expect(page.locator("#task-count")).to_have_text("1\u2013200 of 5000")
        expect(page.locator("#tl-summary")).to_contain_text("children 5000: unschedulable 5000")
        # Its children a page at a time (the page showed the first 64 and no way on).
        first, second = dashboard.client(pages)
        where = page.locator("#pg-where")
        expect(where).to_have_text(f"children 1\u2013{MAX_CHILDREN} of 5000")
        expect(where).to_have_attribute("data-first", first)
        expect(page.locator("#pg-prev")).to_be_disabled()
        page.click("#pg-next")
        expect(where).to_have_text(f"children {MAX_CHILDREN + 1}\u2013{2 * MAX_CHILDREN} of 5000")
        expect(where).to_have_attribute("data-first", second)
        page.wait_for_timeout(3500)  # a refresh keeps the page
        expect(where).to_have_attribute("data-first", second)
        page.click("#pg-prev")
        expect(where).to_have_attribute("data-first", first)
        browser.close()


def test_a_pending_task_says_why_and_when_it_may_start(dashboard: Dashboard) -> None:
    """Two children for one 2-GPU partition: while the first runs, the second's page says it
    waits in that queue, the scheduler's reason, and the start fedhpc predicted."""
    sync_playwright, expect = need_browser()

    async def one_waits(client: DaemonClient) -> tuple[str, str]:
        group = await client.submit_group(
            SubmitGroupRequest(
                objective="two for one partition",
                children=tuple(GroupChild(command=("sleep", "300")) for _ in range(2)),
                envelope=QUEUED,
            )
        )
        with anyio.fail_after(120):
            while True:  # until the scheduler has started one and holds the other
                now = {}
                for c in group.children:
                    m = await client.get_result(ResultRequest(task_id=c.task_id, preview="none"))
                    now[m.attempts[-1].state if m.attempts else None] = c.task_id
                if JobState.PENDING in now and JobState.RUNNING in now:
                    return group.group_id, now[JobState.PENDING]
                await anyio.sleep(1)

    async def cancel(client: DaemonClient) -> None:
        await client.cancel(CancelRequest(task_id=gid))

    async def told(client: DaemonClient) -> tuple[str, str, str]:
        """The same sentence from `fedhpc task` (a person's shell) and get_result (a real MCP
        client over stdio): the daemon words it once for every face."""
        shown = await anyio.run_process([*FEDHPC, "task", task_id], env=dashboard.env)
        params = stdio_params(dashboard.home, "--no-autostart", **dashboard.env)
        async with Client(params, mode="legacy") as mcp:
            got = await mcp.call_tool("get_result", {"task_id": task_id, "preview": "none"})
        assert not got.is_error and got.structured_content is not None, got.content
        direct = await client.get_result(ResultRequest(task_id=task_id, preview="none"))
        return (
            shown.stdout.decode(),
            str(got.structured_content.get("waiting")),
            str(direct.waiting),
        )

    gid, task_id = dashboard.client(one_waits)
    try:
        cli, mcp, rest = dashboard.client(told)
        for said in (cli, mcp, rest):
            assert re.search(r"pending in devanvil/ai's queue \(job \d+\) for \d+ \w+", said), said
            assert re.search(r"scheduler's reason: (Resources|Priority) \(", said), said
            assert re.search(r"fedhpc predicted a \d+ \w+ wait \([^)]+\): start about ", said), said
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
            context = browser.new_context(
                viewport={"width": 1440, "height": 900}, timezone_id="Asia/Kolkata"
            )
            page = context.new_page()
            page.goto(f"{dashboard.url}#/tasks/task/{task_id}")
            page.wait_for_selector("#timeline[data-attempts='1']", timeout=20_000)
            why = page.locator("#why-pending")
            expect(why).to_contain_text(
                re.compile(r"Pending in devanvil/ai's queue \(job \d+\) for")
            )
            expect(why).to_contain_text(re.compile(r"scheduler's reason: (Resources|Priority) \("))
            expect(why).to_contain_text("fedhpc predicted a")
            found = re.search(r"start about (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC", rest)
            assert found, rest
            start = datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
            expect(why).to_contain_text(f"start about {_shown(start, 'UTC')}")
            # In local time, the sentence's start too (it stayed in UTC), the same instant.
            page.select_option("#tz", "local")
            expect(why).to_contain_text(f"start about {_shown(start, 'UTC+05:30', KOLKATA)}")
            expect(why).not_to_contain_text(" UTC;")
            expect(why).not_to_contain_text(re.compile(r"\d\d UTC(,|$|\.)"))
            browser.close()
    finally:
        dashboard.client(cancel)
