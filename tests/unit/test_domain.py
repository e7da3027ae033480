"""Domain types: envelopes, units, shapes, job specs and the state table."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from fedhpc.domain import (
    TERMINAL,
    TRANSITIONS,
    ArraySpec,
    JobSpec,
    JobState,
    ResourceEnvelope,
    Shape,
    aggregate_state,
    merge_state,
)
from fedhpc.domain.units import format_hms, parse_duration, parse_memory_mib


def _locs(exc: ValidationError) -> list[str]:
    return [".".join(str(p) for p in e["loc"]) for e in exc.errors()]


def test_envelope_accepts_units_and_keeps_bounds() -> None:
    env = ResourceEnvelope.model_validate(
        {
            "gpus": {"min": 1, "max": 4},
            "memory": {"min": "16G", "max": "64G"},
            "wall_time": {"min": "30m", "max": "02:00:00"},
            "accelerator_types": ["a100", "h100"],
        }
    )
    assert env.memory.min == 16 * 1024
    assert env.wall_time.upper == 7200
    assert env.gpus.upper == 4
    assert env.cpus.upper == 1  # no max given: the max is the min
    assert env.wants_gpus


def test_envelope_error_names_the_dimension_whose_max_is_below_min() -> None:
    with pytest.raises(ValidationError) as info:
        ResourceEnvelope.model_validate({"gpus": {"min": 5, "max": 4}})
    assert _locs(info.value) == ["gpus"]
    assert "below min" in str(info.value)


def test_envelope_rejects_unknown_field_by_name() -> None:
    with pytest.raises(ValidationError) as info:
        ResourceEnvelope.model_validate({"gpu": {"min": 1}})
    assert "gpu" in _locs(info.value)


def test_envelope_rejects_contradictions() -> None:
    with pytest.raises(ValidationError, match="both included and excluded"):
        ResourceEnvelope(sites_include=("delta",), sites_exclude=("delta",))
    with pytest.raises(ValidationError, match="accelerator constraints"):
        ResourceEnvelope.model_validate({"accelerator_types": ["a100"]})


def test_envelope_records_draft_provenance() -> None:
    env = ResourceEnvelope.model_validate(
        {"draft": {"source": "assistant", "rationale": "7B model fits one A100", "confidence": 0.6}}
    )
    assert env.draft is not None and env.draft.confidence == 0.6
    with pytest.raises(ValidationError) as info:
        ResourceEnvelope.model_validate({"draft": {"source": "assistant", "confidence": 2}})
    assert _locs(info.value) == ["draft.confidence"]


@pytest.mark.parametrize(
    ("text", "mib"), [("4G", 4096), ("512M", 512), ("1.5T", 1572864), (2048, 2048), ("8GiB", 8192)]
)
def test_memory_sizes_parse_to_mib(text: str | int, mib: int) -> None:
    assert parse_memory_mib(text) == mib


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 5400),
        ("10:30", 630),
        ("01:00:00", 3600),
        ("1-02:00:00", 93600),
        ("2h", 7200),
        ("45m", 2700),
        (120, 120),
        ("1-0", 86400),
    ],
)
def test_durations_parse_like_slurm(text: str | int, seconds: int) -> None:
    assert parse_duration(text) == seconds
    assert parse_duration(format_hms(seconds)) == seconds


@pytest.mark.parametrize("bad", ["ten minutes", "-5", True, "1:2:3:4"])
def test_bad_durations_are_rejected(bad: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(bad)


def test_terminal_states_have_no_exits_and_every_state_is_in_the_table() -> None:
    assert set(TRANSITIONS) == set(JobState)
    for state in TERMINAL:
        assert TRANSITIONS[state] == frozenset()
        assert state.terminal
    assert JobState.RUNNING in TRANSITIONS[JobState.PENDING]
    assert JobState.PENDING not in TRANSITIONS[JobState.RUNNING]


def test_observations_merge_monotonically() -> None:
    assert merge_state(JobState.RUNNING, JobState.PENDING) is JobState.RUNNING  # stale poll
    assert merge_state(JobState.SUBMITTED, JobState.COMPLETED) is JobState.COMPLETED
    assert merge_state(JobState.COMPLETED, JobState.RUNNING) is JobState.COMPLETED
    assert merge_state(JobState.CANCELLED, JobState.COMPLETED) is JobState.CANCELLED
    assert merge_state(JobState.PENDING, JobState.RUNNING) is JobState.RUNNING


def test_array_state_considers_every_element() -> None:
    done, fail, run, pend = (
        JobState.COMPLETED,
        JobState.FAILED,
        JobState.RUNNING,
        JobState.PENDING,
    )
    assert aggregate_state([done, done, fail]) is fail  # not just the first row
    assert aggregate_state([done, pend]) is run  # some finished, some waiting: in progress
    assert aggregate_state([pend, pend]) is pend
    assert aggregate_state([done] * 3) is done


def test_shape_and_array_validate() -> None:
    assert Shape(wall_time_s="1h", memory_mib="2G").memory_mib == 2048
    assert ArraySpec(start=1, stop=10, step=3).size == 4
    with pytest.raises(ValidationError, match="below"):
        ArraySpec(start=5, stop=1)


def _spec(**kw: object) -> JobSpec:
    base: dict[str, object] = {
        "name": "fedhpc-t1-1",
        "command": ["echo", "hi"],
        "partition": "cpu",
        "shape": {},
    }
    base.update(kw)
    return JobSpec.model_validate(base)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("name", "job name"),
        ("name", "x\n#SBATCH --wrap=id"),
        ("workdir", "/tmp/$(id)"),
        ("stdout", "out\n#SBATCH -A x"),
        ("stderr", "a b"),
        ("workdir", "/scratch/../etc"),
        ("account", "acct;id"),
        ("partition", "cpu --qos=high"),
        ("qos", "`id`"),
    ],
)
def test_job_spec_rejects_unsafe_directive_values_naming_the_field(field: str, value: str) -> None:
    with pytest.raises(ValidationError) as info:
        _spec(**{field: value})
    assert _locs(info.value)[0] == field


def test_job_spec_rejects_bad_environment_names() -> None:
    with pytest.raises(ValidationError) as info:
        _spec(env={"A;B": "x"})
    assert _locs(info.value)[0].startswith("env")
    assert _spec(env={"OK_NAME": "any $(value) `at` all"}).env["OK_NAME"].startswith("any")


def test_partition_rejects_min_nodes_above_max() -> None:
    from fedhpc.domain import PartitionSpec

    with pytest.raises(ValidationError, match="exceeds max_nodes_per_job"):
        PartitionSpec.model_validate(
            {
                "name": "p",
                "node": {"cpus": 1, "memory_mib": 1},
                "max_wall_s": 60,
                "min_nodes_per_job": 4,
                "max_nodes_per_job": 2,
            }
        )


def test_extra_directives_must_look_like_directives() -> None:
    from fedhpc.domain import SiteConventions

    assert SiteConventions(extra_directives=("-l filesystems=home:eagle",)).extra_directives
    with pytest.raises(ValidationError, match="not a directive"):
        SiteConventions(extra_directives=("-l x\n#PBS -q evil",))


def test_accounting_record_is_settled_only_when_terminal_and_complete() -> None:
    from datetime import UTC, datetime

    from fedhpc.domain import AccountingRecord

    t = datetime(2026, 11, 29, tzinfo=UTC)
    partial = AccountingRecord(
        job_id="1", state=JobState.COMPLETED, native_state="COMPLETED", submit=t, end=t
    )
    assert not partial.settled  # slurmdbd has not recorded the partition yet
    assert partial.final  # ... but the outcome is known
    full = partial.model_copy(update={"partition": "cpu"})
    assert full.settled
    running = full.model_copy(update={"state": JobState.RUNNING})
    assert not running.settled
    assert not running.final
    assert not partial.model_copy(update={"end": None}).final
