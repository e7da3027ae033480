"""replan's reading of the scheduler's answer: only a job still listed as not started may be
superseded. Observations come from the real squeue parser on squeue's own output."""

from __future__ import annotations

import pytest

from fedhpc.adapters.command import CommandResult
from fedhpc.adapters.dialects.slurm_parse import parse_squeue
from fedhpc.domain.job import JobObservation
from fedhpc.errors import UsageError
from fedhpc.orchestrator.replan_checks import LEFT_QUEUE, started_refusal, what_scheduler_says


def _squeue(*rows: str, returncode: int = 0, stderr: str = "") -> list[JobObservation]:
    return parse_squeue(CommandResult(returncode, "".join(f"{r}\n" for r in rows), stderr))


@pytest.mark.parametrize(
    ("row", "said"),
    [
        ("41|PENDING|Priority|cpu||t_1", None),
        ("41|PENDING|Resources|cpu||t_1", None),
        ("41|PENDING|BadConstraints|cpu||t_1", None),  # unschedulable: never started
        ("41|PENDING|JobHeldUser|cpu||t_1", None),  # held: not started
        ("41|RUNNING|None|cpu|n1|t_1", "running"),
        ("41|CONFIGURING|None|cpu|n1|t_1", "running"),
        ("41|COMPLETING|None|cpu|n1|t_1", "running"),
        ("41|SUSPENDED|None|cpu|n1|t_1", "running"),
        ("41|COMPLETED|None|cpu|n1|t_1", "completed"),
        ("41|FAILED|NonZeroExitCode|cpu|n1|t_1", "failed"),
        ("41|TIMEOUT|None|cpu|n1|t_1", "timeout"),
        ("41|CANCELLED|None|cpu||t_1", "cancelled"),
    ],
)
def test_anything_but_not_started_counts_as_started(row: str, said: str | None) -> None:
    assert what_scheduler_says("41", _squeue(row)) == said


def test_a_job_missing_from_the_answer_has_left_the_queue() -> None:
    """squeue lists no job that already ended: a short job that started and ended between two
    probes is absent, and replanning it as 'not started' would run it again."""
    assert what_scheduler_says("41", _squeue()) == LEFT_QUEUE
    assert what_scheduler_says("41", _squeue("42|PENDING|Priority|cpu||t_2")) == LEFT_QUEUE
    gone = _squeue(returncode=1, stderr="slurm_load_jobs error: Invalid job id specified")
    assert what_scheduler_says("41", gone) == LEFT_QUEUE


def test_an_array_counts_as_started_when_any_element_did() -> None:
    rows = _squeue("41_[2-9]|PENDING|Resources|cpu||t_1", "41_1|RUNNING|None|cpu|n1|t_1")
    assert what_scheduler_says("41", rows) == "running"
    assert what_scheduler_says("41", _squeue("41_[1-9]|PENDING|Resources|cpu||t_1")) is None


@pytest.mark.parametrize(
    ("said", "message"),
    [
        ("running", "task t_1 is running"),
        (LEFT_QUEUE, "its job 41 has left alpha's queue since fedhpc's last probe (it ran, or"),
        ("completed", "its job 41 on alpha has already ended (completed)"),
    ],
)
def test_the_refusal_says_what_the_scheduler_said(said: str, message: str) -> None:
    err = started_refusal("t_1", "alpha", "41", said)
    assert isinstance(err, UsageError)
    assert message in err.message
    assert err.hint
    if said != "running":
        assert "get_result(t_1)" in err.hint and "unchanged" in err.hint


@pytest.mark.parametrize(
    ("returncode", "stderr"),
    [
        (1, "squeue: error: Unable to contact slurm controller (connect failure)"),
        (124, ""),  # killed by its timeout
    ],
)
def test_a_failed_squeue_is_not_read_as_a_job_that_left_the_queue(
    returncode: int, stderr: str
) -> None:
    """Only squeue's own 'Invalid job id' means gone: a controller that does not answer
    raises, and replan keeps the stored state (task_tools catches it) instead of refusing."""
    with pytest.raises(ValueError, match="squeue failed"):
        _squeue(returncode=returncode, stderr=stderr)
