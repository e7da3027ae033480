"""`fedhpc ui` in a real headless Chromium (Debian's chromium, driven by Playwright), on the
local Slurm federation: `fedhpc demo --keep` runs a 4-child group in which one child is
re-placed, resumes its agent, then leaves the daemon and the dashboard running. The pages must
show the four sites with the right GPU counts (live: a job started meanwhile shows up), the
group's five attempts with the re-placement marked, and the resume; with no console error.
Screenshots go to the test's folder (and to docs/img/ with FEDHPC_UPDATE_SCREENSHOTS=1)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.integration.daemon_util import sbatch
from tests.integration.test_demo_process import _check_resume
from tests.integration.test_demo_slurm import _no_load_left
from tests.integration.test_ui_views import BLOCKS, OVERLAPS
from tests.integration.ui_util import (
    CHROMIUM,
    FLAGS,
    RED,
    SITES,
    Kept,
    Troubles,
    colours,
    estimators,
    gpus,
    in_pty,
    judged_jobs,
    keep_demo,
    need_browser,
    shot,
    timeline_rows,
    unstyled,
)

pytestmark = pytest.mark.devfed


@pytest.fixture(scope="module")
def kept(devfed: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kept]:
    yield from keep_demo(devfed, tmp_path_factory)


def test_demo_on_slurm_resumes_the_agent_with_a_replaced_attempt(devfed: Any, kept: Kept) -> None:
    """`fedhpc demo --sites slurm` (here with --keep, as `./dev demo` runs it): the group runs
    on the four Slurm clusters, the child stuck on the busy devanvil is re-placed, the agent
    is resumed once for the round, and the background load is cancelled at the end."""
    out = kept.out
    assert "local federation: 4 Slurm clusters up" in out, out
    assert "devanvil's H100s are now busy with background jobs" in out, out
    _check_resume(out)
    _no_load_left(devfed)


def test_dashboard_shows_the_federation_the_replaced_attempt_and_the_resume(
    devfed: Any, kept: Kept, tmp_path: Path
) -> None:
    sync_playwright, expect = need_browser()
    url, gid, out = kept.url, kept.group_id, kept.out
    job = None
    try:
        assert f"xdg-open '{url}'" in out and "fedhpc daemon stop" in out, out

        # The API wants the token in its header (not the URL); another host name gets nothing.
        base = url.split("/?")[0]
        token = url.split("token=")[1]
        refused_paths = [
            ("/api/federation", {}),
            (f"/api/federation?token={token}", {}),
            ("/api/federation", {"X-Fedhpc-Token": "wrong"}),
            (f"/?token={token}", {"Host": "evil.example"}),
        ]
        for path, headers in refused_paths:
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(urllib.request.Request(base + path, headers=headers))
            assert refused.value.code == 403, path
        ok = urllib.request.Request(base + "/api/health", headers={"X-Fedhpc-Token": token})
        with urllib.request.urlopen(ok) as answer:
            assert answer.status == 200
        with urllib.request.urlopen(url) as answer:  # the page: no data, and no cookie
            assert answer.status == 200 and answer.headers.get("Set-Cookie") is None

        # A job started now on devdelta must appear on the page by itself (live refresh).
        job = sbatch(
            devfed,
            "devdelta",
            "-p",
            "gpuA100x4",
            "-A",
            "fedhpc-gpu",
            "--gres=gpu:a100:1",
            "-t",
            "10",
            "--wrap",
            "sleep 300",
        )
        total = {s: gpus(devfed, s) for s in SITES}
        expected = {s: (n, n - (1 if s == "devdelta" else 0)) for s, n in total.items()}
        shots = tmp_path / "screenshots"
        shots.mkdir()
        # The daemon's own rows (its loop, before Playwright's holds this thread).
        judged = anyio.run(estimators, kept.home)
        jobs = anyio.run(judged_jobs, kept.home)
        assert jobs, "the daemon lists no judged jobs"
        assert judged, "the demo's finished jobs were not judged"
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            troubles = Troubles(page)

            # 1. Federation: every site with its free/total GPUs, refreshed live.
            page.goto(url)
            page.wait_for_selector("body[data-ready=federation]")
            want = {site: f"{free}/{total}" for site, (total, free) in expected.items()}
            shown: dict[str, str] = {}
            deadline = time.monotonic() + 30
            while shown != want and time.monotonic() < deadline:
                page.wait_for_timeout(500)
                shown = {
                    s: page.locator(f"tr.site-row[data-site={s}] td.gpus").inner_text()
                    for s in SITES
                }
            assert shown == want, (shown, devfed.run("devdelta", "squeue").stdout)
            assert page.locator("tr.site-row").count() == 4
            assert page.locator("#scatter").is_visible()
            # The scatter's newest point per site counts the partitions the table shows (not
            # devdeltaai's blocked interactive one): never more free GPUs than the site's total.
            page.wait_for_selector("#scatter[data-newest]")
            newest = json.loads(page.locator("#scatter").get_attribute("data-newest") or "{}")
            assert set(newest) == set(SITES), newest
            assert all(newest[s]["x"] <= total[s] for s in SITES), (newest, total)
            # The wait estimators judged on the demo's finished jobs: the daemon's own rows
            # (as `fedhpc status` prints them), each with its jobs and errors, on the page.
            assert {r["site"] for r in judged} <= set(SITES), judged
            rows = page.locator("#est-table tr.est-row")
            expect(rows).to_have_count(len(judged))
            for r in judged:
                key = f"[data-site={r['site']}][data-partition='{r['partition']}']"
                row = page.locator(f"#est-table tr.est-row{key}[data-method={r['method']}]")
                expect(row.locator("td.n")).to_have_text(str(r["n"]))
                expect(row.locator("td.err")).to_have_text(f"{r['median_abs_error_s']:.1f} s")
                bias = r["median_bias_s"]
                sign = "-" if bias < 0 else "+"
                expect(row.locator("td.bias")).to_have_text(f"{sign}{abs(bias):.1f} s")
                # The auto column words the daemon's own decision (auto_prefers), no other.
                auto = row.locator("td.auto")
                if r["auto_prefers"]:
                    expect(auto).to_have_text(re.compile(r"\S"))
                else:
                    expect(auto).to_have_text("")
            expect(page.locator("#est-table .est-empty")).to_have_count(0)
            # Queue history: the newest judged job's partition shows, at each judged job's
            # start, the wait it had beside the wait placement predicted (the daemon's jobs).
            newest_job = max(jobs, key=lambda j: j["at"])
            key = f"{newest_job['site']}/{newest_job['partition']}"
            page.select_option("#qh-pick", key)
            page.wait_for_function(
                "k => { const s = document.querySelector('#queue-history').dataset.series;"
                " return s && JSON.parse(s).key === k && JSON.parse(s).judged.length > 0; }",
                arg=key,
            )
            series = json.loads(page.locator("#queue-history").get_attribute("data-series") or "")
            theirs = {
                (j["at"], j["observed_s"]): j["predicted_s"]
                for j in jobs
                if f"{j['site']}/{j['partition']}" == key
            }
            for j in series["judged"]:
                p = theirs[(j["at"], j["observed_s"])]
                assert j["predicted_s"] == p.get("scheduler", p.get("learned", p.get("paper"))), j
            assert (newest_job["at"], newest_job["observed_s"]) in {
                (j["at"], j["observed_s"]) for j in series["judged"]
            }, (series, newest_job)
            page.wait_for_timeout(500)
            shot(page, shots, "federation")

            # 2. The group's timeline: five attempts, one superseded on devanvil and re-placed.
            troubles.leave(lambda: page.goto(f"{url}#/tasks/group/{gid}"))
            page.wait_for_selector("#timeline[data-attempts='5']", timeout=20_000)
            attempts = page.locator(".vis-item.attempt")
            expect(attempts).to_have_count(5)
            moved = page.locator(".vis-item.superseded")
            expect(moved).to_have_count(1)
            expect(moved).to_contain_text("moved")
            replaced = page.locator(".vis-item.cause-re-placed")
            expect(replaced).to_have_count(1)
            expect(replaced).to_contain_text("re-placed")
            expect(page.locator(".vis-item.state-completed")).to_have_count(4)
            expect(page.locator("#tl-summary")).to_contain_text("round 1, completed")
            # devanvil's row holds the moved attempt (vis-timeline puts items in group rows).
            expect(page.locator(".vis-label", has_text="devanvil")).to_have_count(1)
            # The moved attempt only ever waited in devanvil's queue: drawn all queue wait
            # (it looked like as much work as the others); each other one ran.
            expect(moved).to_have_class(re.compile(r"\bnever-started\b"))
            assert moved.get_attribute("data-wait") == "1.0000"
            ran = page.locator(".vis-item.attempt:not(.superseded)")
            assert all(
                float(w or 1) < 1
                for w in ran.evaluate_all("(items) => items.map((i) => i.dataset.wait)")
            ), ran.evaluate_all("(items) => items.map((i) => i.dataset.wait)")
            moved.hover()
            expect(page.locator("#tip")).to_contain_text("re-placed to")
            expect(page.locator("#tip")).to_contain_text("never started")
            look = (
                "(e) => [getComputedStyle(e).backgroundColor, getComputedStyle(e).backgroundImage]"
            )
            unselected = replaced.evaluate(look)
            replaced.click()
            # Selected, a finished attempt keeps its colours (it turned running's yellow).
            expect(replaced).to_have_class(re.compile(r"\bvis-selected\b"))
            assert replaced.evaluate(look) == unselected, unselected
            detail = page.locator("#attempt-detail")
            expect(detail).to_contain_text("why: re-placed")
            expect(detail).to_contain_text("placement:")
            expect(detail).to_contain_text("UTC")
            shot(page, shots, "timeline")
            # A phone: one column, the Gantt the screen's width, no two boxes overlapping.
            phone = browser.new_page(viewport={"width": 390, "height": 844})
            phone.goto(f"{url}#/tasks/group/{gid}")
            phone.wait_for_selector("#timeline[data-attempts='5']", timeout=20_000)
            phone.wait_for_timeout(500)
            laid = phone.evaluate(OVERLAPS, BLOCKS)
            assert laid["found"] == [] and laid["scroll"] <= 390, laid
            shot(phone, shots, "timeline-phone")
            phone.close()

            # 3. Events and deliveries: the round's event and the resume it caused.
            troubles.leave(lambda: page.goto(f"{url}#/events"))
            page.wait_for_selector("body[data-ready=events]")
            row = page.locator(
                "#deliveries tr[data-status=delivered][data-event='group.round_terminal']"
            )
            expect(row.first).to_contain_text(gid)
            expect(page.locator("#events tr[data-kind='group.round_terminal']")).to_have_count(1)
            # The child fedhpc moved off the busy devanvil is an event of its own: from where,
            # to where and why, its subject a link to the task's timeline (the stream showed
            # one row, the round, for the whole demo).
            went = page.locator("#events tr[data-kind='task.moved']")
            expect(went).to_have_count(1)
            expect(went).to_contain_text(re.compile(r"moved devanvil/ai → dev\w+/\S+"))
            expect(went).to_contain_text("finishes sooner")
            expect(went.locator("td.subject a")).to_have_attribute(
                "href", re.compile(r"^#/tasks/task/t")
            )
            shot(page, shots, "deliveries")
            # The token left the address bar for sessionStorage: a reload still reads; no cookie.
            assert "token=" not in page.url, page.url
            assert page.context.cookies() == []
            troubles.leave(page.reload)
            page.wait_for_selector("body[data-ready=events]")
            expect(row.first).to_contain_text(gid)
            expect(page.locator("#banner")).to_be_hidden()
            # Another browser session without the token gets the page but no data, and is told.
            stranger = browser.new_context().new_page()
            stranger.goto(base + "/")
            stranger.wait_for_selector("body[data-ready=federation]")
            expect(stranger.locator("#banner")).to_contain_text("needs its token")
            expect(stranger.locator("tr.site-row")).to_have_count(0)
            troubles.leave(browser.close)
        assert troubles.found == [], troubles.found
        assert sorted(p.name for p in shots.iterdir()) == [
            "ui-deliveries.png",
            "ui-federation.png",
            "ui-timeline-phone.png",
            "ui-timeline.png",
        ]
    finally:
        if job is not None:
            devfed.run("devdelta", "scancel", job)


# -- terminal pictures, on the same kept daemon ---------------------------------------------------


def test_terminal_timeline_of_the_group_and_task_in_colour_and_without(kept: Kept) -> None:
    fedhpc = [sys.executable, "-m", "fedhpc.cli.main"]
    code, shown = in_pty([*fedhpc, "group", kept.group_id, "--timeline"], kept.env)
    assert code == 0, shown
    assert colours(shown), repr(shown[:400])  # a terminal gets colour
    # Every task done: nothing in the red (or orange) of failure, not a site, not a move.
    assert not colours(shown) & RED, colours(shown)
    text = unstyled(shown)
    assert f"group {kept.group_id}: completed, round 1 (completed 4)" in text, text
    rows = timeline_rows(text)
    assert len(rows) == 5, text
    moved = [ln for ln in rows if "moved ✕" in ln]
    assert len(moved) == 1 and moved[0].startswith("devanvil") and "·✕" in moved[0], text
    assert sum(ln.rstrip().endswith("re-placed") for ln in rows) == 1, text  # its successor
    assert all("█" in ln for ln in rows if ln not in moved), text  # each ran: a solid bar
    assert re.search(r"ckpt\d #1: first placement; superseded \(re-placed to dev", text), text

    # NO_COLOR and --no-color: the same picture with no colour at all.
    _, no_env = in_pty(
        [*fedhpc, "group", kept.group_id, "--timeline"], {**kept.env, "NO_COLOR": "1"}
    )
    _, no_flag = in_pty([*fedhpc, "group", kept.group_id, "--timeline", "--no-color"], kept.env)
    for out in (no_env, no_flag):
        assert colours(out) == set(), repr(out[:400])
        assert len(timeline_rows(unstyled(out))) == 5

    # One task: the re-placed child, on a pipe (no terminal: no escape codes at all).
    moved_task = re.search(r"^  (t\w+-\d) +1 devanvil .*superseded", kept.out, re.M)
    assert moved_task, kept.out
    piped = subprocess.run(
        [*fedhpc, "task", moved_task.group(1), "--timeline"],
        env=kept.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert piped.returncode == 0, piped.stderr
    assert "\x1b[" not in piped.stdout
    lines = timeline_rows(piped.stdout)
    assert len(lines) == 2 and "moved ✕" in lines[0], piped.stdout
    assert lines[1].rstrip().endswith("re-placed"), piped.stdout


def test_status_watch_is_a_live_table_until_ctrl_c(kept: Kept) -> None:
    code, shown = in_pty(
        [sys.executable, "-m", "fedhpc.cli.main", "status", "--watch", "--interval", "0.5"],
        kept.env,
        interrupt_when=lambda text: text.count("federation at") >= 2,
    )
    assert code == 0, shown
    text = unstyled(shown)
    assert text.count("federation at") >= 2, text  # redrawn in place, more than once
    for site in SITES:
        assert site in text
    assert colours(shown)
    assert " offline" not in text and not colours(shown) & RED, colours(shown)


def test_status_json_carries_the_estimator_table(kept: Kept) -> None:
    """`fedhpc status --json`: the federation and, as the table prints it, each wait
    estimator's recent error (the JSON lacked it)."""
    out = subprocess.run(
        [sys.executable, "-m", "fedhpc.cli.main", "status", "--json"],
        env=kept.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    body = json.loads(out.stdout)
    assert {s["site"] for s in body["sites"]} == set(SITES)
    judged = anyio.run(estimators, kept.home)
    assert judged and body["estimators"] == judged


def test_devfed_up_shows_its_steps_on_a_terminal_and_plain_lines_on_a_pipe(kept: Kept) -> None:
    """The federation is up (the fixture used it): `devfed up` is idempotent and quick."""
    argv = [sys.executable, "-m", "fedhpc.cli.main", "devfed", "up"]
    code, shown = in_pty(argv, kept.env)
    assert code == 0, shown
    text = unstyled(shown)
    assert "devfed up: done" in text and "8/8" in text, text
    assert "devfed up: 4 clusters" in text, text
    piped = subprocess.run(
        argv, env=kept.env, capture_output=True, text=True, timeout=200, check=False
    )
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout.startswith("devfed up: 4 clusters") and "\x1b[" not in piped.stdout
