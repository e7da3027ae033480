"""fedhpc_dev.localsched's pure core: directives, time limits, paths, the FIFO + backfill plan."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fedhpc_dev.localsched.model import (
    Config,
    Job,
    Partition,
    Rejected,
    expand_path,
    parse_directives,
    parse_time,
    plan_starts,
)

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
CONFIG = Config({"ai": Partition("ai", nodes=2, cpus=4, memory_mib=8192, max_wall_s=3600, gpus=2)})


def job(job_id: int, *, gpus: int = 0, cpus: int = 1, limit: int = 600, **kw: object) -> Job:
    base: dict[str, object] = {
        "id": job_id,
        "name": f"j{job_id}",
        "partition": "ai",
        "user": "u",
        "account": None,
        "nodes": 1,
        "cpus": cpus,
        "memory_mib": 1024,
        "gpus": gpus,
        "time_limit_s": limit,
        "workdir": "/w",
        "stdout": "/w/o",
        "stderr": "/w/o",
        "submit": NOW,
    }
    base.update(kw)
    return Job(**base)  # type: ignore[arg-type]


def test_directives_are_read_until_the_first_command_line() -> None:
    script = (
        "#!/bin/bash\n#LOCALSCHED --job-name=a\n\n# a comment\n#LOCALSCHED --gpus=2\n"
        "echo hi\n#LOCALSCHED --gpus=4\n"
    )
    assert parse_directives(script) == {"job-name": "a", "gpus": "2"}


def test_a_quoted_line_break_never_starts_a_directive() -> None:
    # bash splits lines at '\n' only: '\r', '\x85', '\u2028' stay inside the line.
    script = "#!/bin/bash\n#LOCALSCHED --job-name=a\necho x\u2028#LOCALSCHED --gpus=9\n"
    assert parse_directives(script) == {"job-name": "a"}


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("01:30", 90), ("02:00:05", 7205), ("1-00:00:01", 86401)],
)
def test_time_limits_parse_like_slurm(text: str, seconds: int) -> None:
    assert parse_time(text) == seconds


def test_bad_time_limit_is_rejected() -> None:
    with pytest.raises(Rejected):
        parse_time("1h")


def test_output_patterns_expand_and_relative_paths_use_the_workdir() -> None:
    assert expand_path("%x-%j.%u.100%%", 7, "n", "bob", "/w/") == "/w/n-7.bob.100%"
    assert expand_path("/abs/%j.out", 7, "n", "bob", "/w") == "/abs/7.out"


def test_gpus_are_packed_onto_nodes_in_name_order_with_distinct_indices() -> None:
    jobs = [job(1, gpus=1), job(2, gpus=1), job(3, gpus=2), job(4, gpus=1)]
    starts = {j.id: slots for j, slots in plan_starts(CONFIG, jobs, NOW)}
    assert starts[1] == [("ai-1", 1, 1024, (0,))]
    assert starts[2] == [("ai-1", 1, 1024, (1,))]
    assert starts[3] == [("ai-2", 1, 1024, (0, 1))]
    assert 4 not in starts
    assert jobs[3].reason == "Resources"


def test_backfill_respects_the_blocked_job_shadow_time() -> None:
    running = job(1, gpus=2, state="RUNNING", start=NOW - timedelta(seconds=100), limit=400)
    running.slots = [("ai-1", 1, 1024, (0, 1))]
    other = job(2, gpus=2, state="RUNNING", start=NOW, limit=3600)
    other.slots = [("ai-2", 1, 1024, (0, 1))]
    head = job(3, gpus=1)  # can start when job 1 ends: in 300 s
    fits = job(4, cpus=1, limit=300)  # ends by then: backfills
    late = job(5, cpus=1, limit=301)  # would end after the head's start: waits its turn
    starts = [j.id for j, _ in plan_starts(CONFIG, [running, other, head, fits, late], NOW)]
    assert starts == [4]
    assert (head.reason, late.reason) == ("Resources", "Priority")
