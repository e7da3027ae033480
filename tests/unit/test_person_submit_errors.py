"""A batch at a per-person site is sent once per person (`submit_by_person`): any refusal of one
person's part (not only a missing login or an unreachable endpoint, but e.g. the endpoint's 404
or 400 for their identity, `TransportUnavailable`) answers their jobs with it and never stops
the people after them from being submitted."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fedhpc.adapters.by_person import submit_by_person
from fedhpc.adapters.transports.base import TransportUnavailable
from fedhpc.domain.job import JobSpec
from fedhpc.globus_auth.people import acting_person
from fedhpc.settings import JOB_FOR

ALICE, BOB = "https://auth.globus.org|u-alice", "https://auth.globus.org|u-bob"


def _job(owner: str, n: int) -> Any:
    spec = JobSpec.model_validate(
        {
            "name": f"j{n}",
            "command": ["true"],
            "partition": "cpu",
            "env": {JOB_FOR.name: owner},
            "shape": {"nodes": 1, "cpus": 1, "wall_time_s": 60},
        }
    )
    return (spec, ())


async def test_one_persons_permanent_refusal_never_stops_the_next_persons_jobs() -> None:
    asked: list[str | None] = []

    async def submit(part: Sequence[Any]) -> list[Any]:
        who = acting_person()
        asked.append(who)
        if who == ALICE:
            raise TransportUnavailable("Globus Compute answered HTTP 404 (NOT_FOUND)")
        return [f"{who}-job" for _ in part]

    got = await submit_by_person(submit, [_job(ALICE, 1), _job(BOB, 2), _job(ALICE, 3)])
    assert asked == [ALICE, BOB]
    assert got[1] == f"{BOB}-job"
    assert isinstance(got[0], TransportUnavailable) and isinstance(got[2], TransportUnavailable)
