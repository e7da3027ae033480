"""A group's child view says why a cancelled child shows no site: cancelled before it was
placed, or cancelled with no current attempt (the cancel superseded the live one, or a replan
or retry had before it: the view cannot tell which, so it says neither)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

from fedhpc.domain.job import JobState
from fedhpc.orchestrator.service import Orchestrator
from fedhpc.store import Store
from tests.unit.attempts import attempt, put_attempt

NOW = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


async def test_a_cancelled_child_without_a_site_says_why(store: Store) -> None:
    """It showed site None with its decision from before the cancel, 'queued: placing'."""
    body = {"decision": "queued: placing", "reasons": ["cancelled on request"]}
    async with store.transaction() as tx:
        await tx.put_group(
            "g1",
            state="running",
            round_=1,
            at=NOW,
            body={"objective": "x", "key": "k", "required": [True] * 3, "spread": True},
        )
        for i, state in enumerate(("cancelled", "cancelled", "queued")):
            await tx.put_task(
                f"t1-{i}", state=state, body=body, at=NOW, idempotency_key=f"k:{i}", group_id="g1"
            )
        # Child 1 was pending at site s when cancelled: its attempt is superseded.
        att = attempt("t1-1", now=NOW, state=JobState.CANCELLED, superseded=True)
        await put_attempt(tx, att, at=NOW)
    view = await Orchestrator(store, cast(Any, None), {}, clock=lambda: NOW).groups.view("g1")
    never, stopped, queued = view.children
    assert never.site is None and stopped.site is None
    assert never.decision == "cancelled before placement: it never reached a site"
    assert stopped.decision == (
        "cancelled; no current attempt: get_result('t1-1') lists the attempts it had"
    )
    assert queued.decision == "queued: placing"  # a live child keeps its own
