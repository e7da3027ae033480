"""Cancels.cancel_attempts (a group's cancel): one scheduler call per site for up to
CANCEL_BATCH job ids; a job a site did not take (no id yet, the site offline, the call
failed) is marked for the control cycle to cancel when it can, never dropped."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

import anyio

from fedhpc.domain.job import JobState
from fedhpc.domain.site import Health
from fedhpc.orchestrator.adapt import Adaptation
from fedhpc.orchestrator.cancels import CANCEL_BATCH
from fedhpc.orchestrator.records import AttemptRecord
from tests.unit.attempts import attempt

NOW = datetime(2026, 12, 1, tzinfo=UTC)


class Scheduler:
    """The SiteAdapter.cancel interface: records each call's job ids; `refuses` raises as
    SiteAdapter does when scancel exits non-zero."""

    def __init__(self, *, refuses: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.refuses = refuses

    async def cancel(self, job_ids: Sequence[str]) -> None:
        self.calls.append(list(job_ids))
        if self.refuses:
            raise RuntimeError("scancel: error: Kill job error on job id 7: already completing")


def _on(site: str, n: int, *, job: bool = True) -> list[AttemptRecord]:
    return [
        attempt(
            f"t{site}{i:04d}",
            now=NOW,
            state=JobState.PENDING,
            site=site,
            job_id=f"{i + 1}" if job else None,
        )
        for i in range(n)
    ]


async def test_jobs_are_cancelled_in_batches_per_site_and_the_rest_marked_for_later() -> None:
    up, refusing, down = Scheduler(), Scheduler(refuses=True), Scheduler()
    collector = SimpleNamespace(
        latest={
            "up": SimpleNamespace(health=Health.OK),
            "refusing": SimpleNamespace(health=Health.OK),
            "down": SimpleNamespace(health=Health.OFFLINE),
        },
        sites={},  # none runs each person as themselves: one cancel per batch, as the service
    )
    adaptation = Adaptation(
        cast(Any, None),
        cast(Any, collector),
        cast(Any, {"up": up, "refusing": refusing, "down": down}),
        cast(Any, None),
        cast(Any, None),
        clock=lambda: NOW,
        site_lost_after_s=60,
        lock=anyio.Lock(),
    )
    many = _on("up", 2 * CANCEL_BATCH + 50)
    unsent = _on("up", 2, job=False)  # its submission has not answered yet: no job id
    offline = _on("down", 3)
    refused = _on("refusing", 4)

    await adaptation.cancels.cancel_attempts([*many, *unsent, *offline, *refused])

    assert [len(c) for c in up.calls] == [CANCEL_BATCH, CANCEL_BATCH, 50]
    assert [j for c in up.calls for j in c] == [a.job_id for a in many]
    assert not any(a.cancel_pending for a in many)
    assert all(a.cancel_pending for a in unsent)
    assert down.calls == []  # nothing is sent to a site that does not answer
    assert all(a.cancel_pending for a in offline)
    assert refusing.calls == [[a.job_id for a in refused]]
    assert all(a.cancel_pending for a in refused)  # retried one by one by the control cycle
