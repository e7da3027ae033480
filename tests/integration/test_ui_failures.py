"""What a person meets when something around `fedhpc ui` goes wrong, in Debian's Chromium: a
second dashboard on the same port, a link to a task the daemon does not know, the daemon
stopping (and coming back) while the page is open, the daemon coming back on another store, a
wrong token, and the dashboard's own server stopping. A real daemon on the four local-process
sites (no Slurm, so no devfed lock), a real `fedhpc ui` process, a real browser. Also the
terminal timeline of an unknown id."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.domain import ResourceEnvelope
from fedhpc.ops.tasks import GroupChild, SubmitGroupRequest, SubmitTaskRequest
from tests.integration.daemon_util import stop, wait_terminal
from tests.integration.ui_served import FEDHPC, Dashboard, serve_dashboard
from tests.integration.ui_util import CHROMIUM, FLAGS, need_browser

ONE_CPU = ResourceEnvelope.model_validate(
    {"gpus": {"min": 0, "max": 0}, "cpus": {"min": 1, "max": 1}, "wall_time": {"min": "5m"}}
)


@pytest.fixture
def dashboard(tmp_path: Path) -> Iterator[Dashboard]:
    yield from serve_dashboard(tmp_path)


def test_a_second_dashboard_on_the_same_port_is_refused_and_the_first_keeps_serving(
    dashboard: Dashboard,
) -> None:
    port = dashboard.url.split(":")[2].split("/")[0]
    saved = (dashboard.home / "ui.url").read_text()
    second = subprocess.run(
        [*FEDHPC, "ui", "--port", port],
        env=dashboard.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert second.returncode == 2, second.stdout + second.stderr
    assert f"error[usage]: cannot listen on 127.0.0.1:{port}: the port is in use" in second.stderr
    assert "hint: Choose another with --port N, or --port 0 for any free port." in second.stderr
    assert "Traceback" not in second.stderr and second.stdout == ""
    assert (dashboard.home / "ui.url").read_text() == saved  # the first one's URL stays
    assert dashboard.ui.poll() is None


def test_the_terminal_timeline_of_an_unknown_id_is_a_typed_not_found(
    dashboard: Dashboard,
) -> None:
    for argv, what in (
        (["task", "tnope", "--timeline"], "no task 'tnope'"),
        (["group", "gnope", "--timeline"], "no group 'gnope'"),
    ):
        out = subprocess.run(
            [*FEDHPC, *argv],
            env=dashboard.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert out.returncode == 4, out.stderr
        assert out.stderr.startswith(f"error[not_found]: {what}\nhint: "), out.stderr
        assert "Traceback" not in out.stderr and out.stdout == ""


def test_the_page_says_what_went_wrong_and_recovers(dashboard: Dashboard) -> None:
    sync_playwright, expect = need_browser()
    base = dashboard.url.split("/?")[0]
    page_errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.on("pageerror", lambda e: page_errors.append(str(e)))
        page.goto(dashboard.url)
        page.wait_for_selector("body[data-ready=federation]")
        expect(page.locator("tr.site-row")).to_have_count(4, timeout=20_000)
        expect(page.locator("#status")).to_contain_text("live")
        # The scatter counts the partitions the table shows: devdeltaai's blocked interactive
        # partition (4 more GPUs) is in neither.
        page.wait_for_selector("#scatter[data-newest]")
        newest = json.loads(page.locator("#scatter").get_attribute("data-newest") or "{}")
        for site, point in newest.items():
            shown = page.locator(f"tr.site-row[data-site={site}] td.gpus").inner_text()
            assert point["x"] <= int(shown.split("/")[1]), (site, point, shown)
        assert newest["devdeltaai"]["x"] == 4, newest

        # A link to a task the daemon does not know: said where its timeline would be; the
        # daemon is fine, so no banner.
        page.evaluate("location.hash = '#/tasks/task/tnope'")
        page.wait_for_selector("body[data-ready=tasks]")
        expect(page.locator("#tl-title")).to_have_text("No task tnope")
        expect(page.locator("#tl-summary")).to_contain_text("no task 'tnope'")
        expect(page.locator("#tl-summary")).to_contain_text("fedhpc tasks")
        expect(page.locator("#banner")).to_be_hidden()
        expect(page.locator("#status")).to_contain_text("live")

        # The daemon stops while the page is open: the page says so, with the command to
        # start it, and keeps polling; once the daemon is back the page is live again.
        page.evaluate("location.hash = '#/federation'")
        page.wait_for_selector("body[data-ready=federation]")
        stop(dashboard.daemon)
        banner = page.locator("#banner")
        expect(banner).to_contain_text("The daemon could not be read: no daemon at", timeout=20_000)
        expect(banner).to_contain_text("Start it with `fedhpc daemon`")
        expect(page.locator("#status")).to_have_text("daemon unreachable")
        dashboard.restart_daemon()
        expect(banner).to_be_hidden(timeout=30_000)
        expect(page.locator("#status")).to_contain_text("live")
        expect(page.locator("tr.site-row")).to_have_count(4)

        # A wrong token (another run's URL): the page loads, reads nothing, and says why,
        # naming where this run left its URL (the hint printed `<home>/ui.url` literally).
        stranger = browser.new_context().new_page()
        stranger.on("pageerror", lambda e: page_errors.append(str(e)))
        stranger.goto(base + "/?token=not-this-one")
        stranger.wait_for_selector("body[data-ready=federation]")
        wrong = stranger.locator("#banner")
        expect(wrong).to_contain_text("this dashboard does not take that token")
        expect(wrong).to_contain_text(f"also in {dashboard.home / 'ui.url'}")
        expect(stranger.locator("#status")).to_have_text("wrong token")
        expect(stranger.locator("tr.site-row")).to_have_count(0)
        # No token at all (a new tab opened without the printed URL): said as that.
        bare = browser.new_context().new_page()
        bare.goto(base + "/")
        bare.wait_for_selector("body[data-ready=federation]")
        expect(bare.locator("#banner")).to_contain_text("this dashboard needs its token")
        expect(bare.locator("#banner")).to_contain_text(str(dashboard.home / "ui.url"))
        expect(bare.locator("#status")).to_have_text("token missing")

        # The dashboard's own server stops (Ctrl-C): not blamed on the daemon.
        dashboard.ui.send_signal(signal.SIGINT)
        assert dashboard.ui.wait(timeout=30) == 0
        expect(banner).to_contain_text("the dashboard's server (`fedhpc ui`) does not answer")
        expect(banner).to_contain_text("start `fedhpc ui` again")
        expect(page.locator("#status")).to_have_text("dashboard stopped")
        browser.close()
    assert page_errors == [], page_errors
    assert not (dashboard.home / "ui.url").exists()  # removed by the dashboard that wrote it


def test_every_page_says_the_daemon_is_down(dashboard: Dashboard) -> None:
    """With the daemon stopped, each page shows the banner and `daemon unreachable`. The Tasks
    page read "live" with no banner: with nothing selected its timeline poll read nothing,
    "succeeded", and cleared the banner of the lists' failed read."""
    sync_playwright, expect = need_browser()
    page_errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.on("pageerror", lambda e: page_errors.append(str(e)))
        page.goto(dashboard.url + "#/tasks")  # no task yet: nothing is selected
        page.wait_for_selector("body[data-ready=tasks]")
        expect(page.locator("#status")).to_contain_text("live")
        stop(dashboard.daemon)
        banner = page.locator("#banner")
        expect(banner).to_contain_text("The daemon could not be read: no daemon at")
        for name in ("federation", "events", "tasks"):
            page.evaluate(f"location.hash = '#/{name}'")
            page.wait_for_selector(f"body[data-ready={name}]")
            # Said from the page's first reads on and all the time, not only between two
            # polls: looked at over two polls of each read.
            seen = []
            for _ in range(14):
                page.wait_for_timeout(500)
                seen.append((banner.is_visible(), page.locator("#status").inner_text()))
            assert set(seen) == {(True, "daemon unreachable")}, (name, seen)
        expect(banner).to_contain_text("The daemon could not be read: no daemon at")
        dashboard.restart_daemon()
        expect(banner).to_be_hidden(timeout=30_000)
        expect(page.locator("#status")).to_contain_text("live")
        browser.close()
    assert page_errors == [], page_errors


async def _several_done(client: DaemonClient) -> tuple[str, list[str], int]:
    """Four tasks and then a group of two, finished (an event each): (the group's id, every
    task's id, the newest event seq)."""
    singles = [
        await client.submit_task(SubmitTaskRequest(command=("true",), envelope=ONE_CPU))
        for _ in range(4)
    ]
    group = await client.submit_group(
        SubmitGroupRequest(
            objective="two quick ones",
            children=tuple(GroupChild(command=("true",), name=f"old{i}") for i in range(2)),
            envelope=ONE_CPU,
        )
    )
    tasks = [t.task_id for t in singles] + [c.task_id for c in group.children]
    for task_id in tasks:
        await wait_terminal(client, task_id)
    return group.group_id, tasks, int((await client.health())["last_event_seq"])


async def _task_done(client: DaemonClient) -> tuple[str, int]:
    """One finished task: (its id, the newest event seq)."""
    task = await client.submit_task(
        SubmitTaskRequest(command=("true",), envelope=ONE_CPU, name="after-restart")
    )
    await wait_terminal(client, task.task_id)
    return task.task_id, int((await client.health())["last_event_seq"])


def test_the_page_follows_the_daemon_restarted_on_another_store(dashboard: Dashboard) -> None:
    """The daemon comes back on the same socket with a fresh store, whose event seqs start again
    lower: the page's event cursor is then past its newest event, which the daemon refuses
    (cursor_ahead). The page showed that on a banner at every poll and never read the new log;
    now it reads the new daemon's events afresh, and the timeline it picked by itself (the
    newest group) is replaced by the new daemon's newest."""
    sync_playwright, expect = need_browser()
    group_id, tasks_before, newest = dashboard.client(_several_done)
    gone = {group_id, *tasks_before}
    page_errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        events = browser.new_page(viewport={"width": 1400, "height": 900})
        tasks = browser.new_page(viewport={"width": 1400, "height": 900})
        for page in (events, tasks):
            page.on("pageerror", lambda e: page_errors.append(str(e)))
        events.goto(dashboard.url + "#/events")
        events.wait_for_selector("body[data-ready=events]")
        expect(events.locator("#events tbody tr").first.locator("td").first).to_have_text(
            str(newest), timeout=20_000
        )
        tasks.goto(dashboard.url + "#/tasks")  # each tab takes the token
        tasks.wait_for_selector("body[data-ready=tasks]")
        expect(tasks.locator("#tl-title")).to_have_text(
            f"Group {group_id}: two quick ones", timeout=20_000
        )

        stop(dashboard.daemon)
        for f in dashboard.home.glob("fedhpc.db*"):  # the store, its WAL and shared memory
            f.rename(f.with_name("old-" + f.name))
        dashboard.restart_daemon()
        task_id, fresh = dashboard.client(_task_done)
        assert fresh < newest, (fresh, newest)  # the old cursor is beyond the new log

        rows = events.locator("#events tbody tr")
        expect(rows.filter(has_text=task_id).first).to_be_visible(timeout=30_000)
        expect(events.locator("#banner")).to_be_hidden()
        expect(events.locator("#status")).to_contain_text("live")
        shown = rows.evaluate_all(
            "rows => rows.map(r => [Number(r.cells[0].textContent), r.cells[3].textContent])"
        )
        assert all(seq <= fresh for seq, _ in shown), shown
        assert not gone & {subject for _, subject in shown}, shown

        expect(tasks.locator("#tl-title")).to_have_text(
            f"Task {task_id} (after-restart)", timeout=30_000
        )
        expect(tasks.locator("#banner")).to_be_hidden()
        expect(tasks.locator(f"#group-list tr[data-group='{group_id}']")).to_have_count(0)
        browser.close()
    assert page_errors == [], page_errors
