"""PBS per-user job limits count an array's subjobs (issue 40): qstat lists an array job once,
but `max_queued` refuses an array of 5 under a limit of 3 and `max_run` counts running
subjobs (OpenPBS 23.06 on the dev federation), so the probe counts the user's jobs as the
scheduler does, and the hold-back (`max_jobs_per_user`) holds what the scheduler would refuse."""

from __future__ import annotations

import json

from fedhpc.adapters.command import BatchSection
from fedhpc.adapters.dialects.pbs import PbsDialect
from fedhpc.domain.site import SiteProfile
from tests.unit.test_dialect_pbs import NOW, fixture, profile, sections

__all__ = ["profile"]  # the fixture, used by name


def _user_jobs(profile: SiteProfile, array_state_count: str | None) -> tuple[int, int]:
    jobs = json.loads(fixture("qstat_user_jobs.json"))
    parent = jobs["Jobs"]["4822[].pbs01"]  # state B: an array some of whose subjobs run
    if array_state_count is not None:
        parent["array_state_count"] = array_state_count
    got = PbsDialect().parse_probe(
        sections(jobs=BatchSection("jobs", 0, json.dumps(jobs))), profile, "alice", NOW
    )
    gpu = got.partition("gpu")
    assert gpu is not None
    return gpu.user_pending_jobs, gpu.user_running_jobs


def test_an_arrays_subjobs_each_count_as_the_users_jobs(profile: SiteProfile) -> None:
    # Besides the array: one queued and one running job of the user's in the gpu queue.
    counted = _user_jobs(profile, "Queued:3 Running:1 Exiting:0 Expired:0")
    assert counted == (1 + 3, 1 + 1)


def test_an_array_whose_subjobs_ended_counts_only_those_left(profile: SiteProfile) -> None:
    assert _user_jobs(profile, "Queued:0 Running:2 Exiting:1 Expired:1") == (1, 1 + 2)


def test_an_array_without_its_counts_is_one_job_as_before(profile: SiteProfile) -> None:
    assert _user_jobs(profile, None) == (1, 2)
