"""The dashboard reaches every task and every group, and says how many there are: in Debian's
Chromium on a real daemon of the four local-process sites, 25 groups of 9 children (225 tasks,
more than a page of either list) are paged through whole, a search finds the oldest group's
children (the page searched only the newest 200 tasks), and each list states the daemon's
total. The routes under them (tests/unit/test_ui_paging.py, on SQLite) run here on PostgreSQL
too: the page's statements are written for either engine."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.ops.tasks import GroupChild, SubmitGroupRequest
from fedhpc.ui.data import MAX_GROUPS, TASK_PAGE
from tests.integration.test_store_engines import store, store_url  # noqa: F401 (fixtures)
from tests.integration.test_ui_views import NOWHERE
from tests.integration.ui_served import Dashboard, serve_dashboard
from tests.integration.ui_util import CHROMIUM, FLAGS, Troubles, need_browser
from tests.unit.daemon_support import client  # noqa: F401 (a fixture, on this store)
from tests.unit.test_ui_paging import (  # noqa: F401 (collected here, on PostgreSQL)
    test_each_person_pages_their_own_only,
    test_find_searches_every_task_in_any_case_and_literally,
    test_pages_meet_and_count_every_task_and_group,
)

GROUPS, CHILDREN = 25, 9
TASKS = GROUPS * CHILDREN
DASH = "\u2013"


@pytest.fixture
def engine() -> str:
    """The store the unit tests of the routes run on here (on SQLite: in tests/unit)."""
    return "postgresql"


@pytest.fixture
def dashboard(tmp_path: Path) -> Iterator[Dashboard]:
    yield from serve_dashboard(tmp_path)


def _groups(dashboard: Dashboard) -> list[tuple[str, list[str]]]:
    """25 groups of 9 children that fit nowhere (unschedulable at once: no job runs), oldest
    first, each with its children's ids; back once placement has judged every child."""

    async def submit(daemon: DaemonClient) -> list[tuple[str, list[str]]]:
        made = []
        for g in range(GROUPS):
            view = await daemon.submit_group(
                SubmitGroupRequest(
                    objective=f"page {g}",
                    children=tuple(
                        GroupChild(command=("true",), name=f"p{g}x{i}") for i in range(CHILDREN)
                    ),
                    envelope=NOWHERE,
                )
            )
            made.append((view.group_id, [c.task_id for c in view.children]))
        with anyio.fail_after(120):
            for gid, _ in made:
                while (await daemon.group(gid, limit=1)).counts != {"unschedulable": CHILDREN}:
                    await anyio.sleep(0.5)
        return made

    return dashboard.client(submit, limit=240)


def _rows(page: Any, table: str, key: str) -> list[str]:
    found: list[str] = page.locator(f"#{table} tbody tr").evaluate_all(
        f"(rows) => rows.map((r) => r.dataset.{key})"
    )
    return found


def test_every_task_and_group_is_reached_and_counted(dashboard: Dashboard) -> None:
    sync_playwright, expect = need_browser()
    made = _groups(dashboard)
    assert len(made) > MAX_GROUPS and TASKS > TASK_PAGE
    every_task = {t for _, children in made for t in children}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        troubles = Troubles(page)
        page.goto(f"{dashboard.url}#/tasks")
        page.wait_for_selector("body[data-ready=tasks]")

        # Groups: the newest 20 of 25, said so; the older page holds the 5 oldest.
        count = page.locator("#group-count")
        expect(count).to_have_text(f"1{DASH}{MAX_GROUPS} of {GROUPS}", timeout=20_000)
        newest = _rows(page, "group-list", "group")
        assert newest == [gid for gid, _ in reversed(made)][:MAX_GROUPS], newest
        expect(page.locator("#groups-newer")).to_be_disabled()
        page.click("#groups-older")
        expect(count).to_have_text(f"{MAX_GROUPS + 1}{DASH}{GROUPS} of {GROUPS}")
        older = _rows(page, "group-list", "group")
        assert older == [gid for gid, _ in reversed(made)][MAX_GROUPS:], older
        expect(page.locator("#groups-older")).to_be_disabled()
        page.wait_for_timeout(3500)  # a refresh keeps the page
        expect(count).to_have_text(f"{MAX_GROUPS + 1}{DASH}{GROUPS} of {GROUPS}")
        page.click("#groups-newer")
        expect(count).to_have_text(f"1{DASH}{MAX_GROUPS} of {GROUPS}")

        # Tasks: the newest 200 of 225, then the 25 older ones: every task, each once.
        tcount = page.locator("#task-count")
        expect(tcount).to_have_text(f"1{DASH}{TASK_PAGE} of {TASKS}")
        first = _rows(page, "task-list", "task")
        assert len(first) == TASK_PAGE, len(first)
        page.click("#tasks-older")
        expect(tcount).to_have_text(f"{TASK_PAGE + 1}{DASH}{TASKS} of {TASKS}")
        second = _rows(page, "task-list", "task")
        assert len(first) + len(second) == TASKS and set(first) | set(second) == every_task
        assert made[0][1][0] in second  # the oldest group's children are on the older page
        page.click("#tasks-newer")
        expect(tcount).to_have_text(f"1{DASH}{TASK_PAGE} of {TASKS}")

        # Found over every task (it searched the newest 200: the oldest group found nothing).
        oldest, children = made[0]
        assert not set(children) & set(first)
        page.fill("#task-find", oldest)
        expect(tcount).to_have_text(f"{CHILDREN} matching \u201c{oldest}\u201d")
        assert sorted(_rows(page, "task-list", "task")) == sorted(children)
        page.fill("#task-find", "P0X3")  # a child's name, any case (p, x: in no hex id)
        expect(page.locator("#task-list tbody tr")).to_have_count(1)
        expect(page.locator("#task-list tbody tr")).to_contain_text(f"{children[3]} (p0x3)")
        expect(page.locator("#tasks-pager")).to_be_hidden()

        # By state, counted whole: every one is unschedulable, none failed.
        page.fill("#task-find", "")
        page.select_option("#task-state", "unschedulable")
        expect(tcount).to_have_text(f"1{DASH}{TASK_PAGE} of {TASKS} unschedulable")
        page.select_option("#task-state", "failed")
        expect(tcount).to_have_text("0 failed")
        expect(page.locator("#task-list tbody tr")).to_have_count(0)
        page.select_option("#task-state", "")
        expect(tcount).to_have_text(re.compile(rf"^1{DASH}{TASK_PAGE} of {TASKS}$"))
        troubles.leave(browser.close)
    assert troubles.found == [], troubles.found
