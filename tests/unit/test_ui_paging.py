"""The dashboard's paged listings through the real daemon app on a real store: GET /v1/tasks
with `offset` and `find` and GET /v1/groups with `offset` (what `/api/tasks` and `/api/groups`
read), pages that meet without a gap or an overlap, the totals, a search over every task taken
literally, and each person's own only (service mode's owner header)."""

from __future__ import annotations

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.client.wire import ACTING_FOR
from fedhpc.domain import ResourceEnvelope
from fedhpc.ops.tasks import GroupChild, SubmitGroupRequest
from fedhpc.ui.data import group_summaries, task_page

ONE_CPU = ResourceEnvelope.model_validate({"cpus": {"min": 1, "max": 1}})


async def _groups(client: DaemonClient, n: int, size: int, tag: str) -> list[tuple[str, list[str]]]:
    made = []
    for g in range(n):
        children = tuple(GroupChild(command=("true",), name=f"{tag}{g}x{i}") for i in range(size))
        req = SubmitGroupRequest(objective=f"{tag} {g}", children=children, envelope=ONE_CPU)
        gid = (await client.submit_group(req)).group_id
        view = await client.group(gid, limit=size)  # the submit's answer lists a page of them
        made.append((gid, [c.task_id for c in view.children]))
    return made


async def test_pages_meet_and_count_every_task_and_group(client: DaemonClient) -> None:
    made = await _groups(client, 5, 3, "run")  # 15 tasks in pages of 6, 5 groups in pages of 2
    pages = [await task_page(client, offset=o, limit=6) for o in (0, 6, 12, 18)]
    assert [p["total"] for p in pages] == [15] * 4
    assert [len(p["tasks"]) for p in pages] == [6, 6, 3, 0]
    ids = [t["task_id"] for p in pages for t in p["tasks"]]
    assert len(set(ids)) == 15 and set(ids) == {t for _, ts in made for t in ts}
    # In the order `fedhpc tasks` lists them: its first 6 are the first page.
    newest = await client.tasks(limit=6)
    assert [t.task_id for t in newest] == ids[:6]
    second = await client.tasks(limit=6, offset=6)  # the client's page, without its total
    assert [t.task_id for t in second] == ids[6:12]
    groups = [await group_summaries(client, offset=o, limit=2) for o in (0, 2, 4, 6)]
    assert [g["total"] for g in groups] == [5] * 4
    assert [len(g["groups"]) for g in groups] == [2, 2, 1, 0]
    assert [g["group_id"] for p in groups for g in p["groups"]] == [g for g, _ in made[::-1]]
    assert sum(groups[2]["groups"][-1]["counts"].values()) == 3  # counted whole
    views = await client.groups(limit=2, offset=2)
    assert [v.group_id for v in views] == [g["group_id"] for g in groups[1]["groups"]]


async def test_find_searches_every_task_in_any_case_and_literally(client: DaemonClient) -> None:
    made = await _groups(client, 3, 30, "sweep")
    oldest, children = made[0]
    found = await task_page(client, find=oldest.upper(), limit=50)
    assert found["total"] == 30 and {t["task_id"] for t in found["tasks"]} == set(children)
    by_name = await task_page(client, find="SWEEP0X29")
    assert [t["task_id"] for t in by_name["tasks"]] == [children[29]] and by_name["total"] == 1
    for literal in ("%", "_", "\\", "sweep0x%"):  # LIKE's wildcards are text here
        none = await task_page(client, find=literal)
        assert none["total"] == 0 and none["tasks"] == [], literal
    queued = await task_page(client, state="queued", limit=50)
    assert queued["total"] == sum(
        t["state"] == "queued" for t in (await task_page(client, limit=500))["tasks"]
    )


async def test_each_person_pages_their_own_only(client: DaemonClient) -> None:
    mine: dict[str, list[tuple[str, list[str]]]] = {}
    for person, n in (("idp|ann", 3), ("idp|bob", 2)):
        token = ACTING_FOR.set((person, False))
        try:
            mine[person] = await _groups(client, n, 4, person.split("|")[1])
        finally:
            ACTING_FOR.reset(token)
    for person, made in mine.items():
        token = ACTING_FOR.set((person, False))
        try:
            tasks = await task_page(client, limit=500)
            groups = await group_summaries(client)
            found = await task_page(client, find="X1")  # x: in no id (hex), nor a site
        finally:
            ACTING_FOR.reset(token)
        assert tasks["total"] == 4 * len(made)
        assert {t["task_id"] for t in tasks["tasks"]} == {t for _, ts in made for t in ts}
        assert groups["total"] == len(made)
        # (one person's groups made in the same instant are in id order: the store's)
        assert {g["group_id"] for g in groups["groups"]} == {g for g, _ in made}
        assert found["total"] == len(made)  # each of their groups' child ...x1 only
    everyone = await task_page(client, limit=500)  # no owner header: the operator sees all
    assert everyone["total"] == 20
