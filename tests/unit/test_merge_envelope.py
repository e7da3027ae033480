"""replan's envelope: the fields the caller gives replace the task's, the rest stay (a 64-GPU
task replanned with `{}` became a 1-CPU task)."""

from __future__ import annotations

import pytest

from fedhpc.domain import ResourceEnvelope
from fedhpc.errors import ValidationFailed
from fedhpc.placement.normalize import merge_envelope

TASK = ResourceEnvelope.model_validate(
    {
        "gpus": {"min": 8, "max": 8},
        "nodes": {"min": 8, "max": 8},
        "accelerator_types": ["a100"],
        "wall_time": {"min": 3600},
        "sites_include": ["devdelta"],
    }
)


def test_an_empty_envelope_changes_nothing() -> None:
    assert merge_envelope(TASK, ResourceEnvelope.model_validate({})) == TASK


def test_the_given_fields_replace_the_tasks_whole_field_and_the_rest_stay() -> None:
    given = ResourceEnvelope.model_validate({"wall_time": {"min": 7200}, "gpus": {"max": 4}})
    out = merge_envelope(TASK, given)
    assert (out.wall_time.min, out.gpus.min, out.gpus.upper) == (7200, 0, 4)
    assert (out.nodes.min, out.accelerator_types, out.sites_include) == (
        8,
        ("a100",),
        ("devdelta",),
    )


def test_a_field_given_as_empty_clears_it() -> None:
    out = merge_envelope(TASK, ResourceEnvelope.model_validate({"sites_include": []}))
    assert out.sites_include == () and out.gpus.min == 8


def test_a_merge_that_contradicts_itself_names_the_field() -> None:
    """accelerator_types is kept from the task while the new gpus.max is 0."""
    with pytest.raises(ValidationFailed) as err:
        merge_envelope(TASK, ResourceEnvelope.model_validate({"gpus": {"min": 0, "max": 0}}))
    assert "accelerator" in err.value.message


def test_a_drafted_tasks_draft_goes_when_the_caller_gives_other_bounds() -> None:
    """The draft explained the task's numbers; replanned, the bounds are the caller's and
    the provenance must say so (it kept 'heuristic' and the old rationale)."""
    draft = {"source": "heuristic", "rationale": "8 GPUs (stated)", "confidence": 0.6}
    drafted = ResourceEnvelope.model_validate(TASK.model_dump(mode="json") | {"draft": draft})
    assert drafted.draft is not None
    out = merge_envelope(drafted, ResourceEnvelope.model_validate({"gpus": {"min": 1, "max": 2}}))
    assert out.draft is None and out.gpus.upper == 2
    assert merge_envelope(drafted, ResourceEnvelope.model_validate({})).draft == drafted.draft


def test_a_clash_with_a_field_kept_from_the_task_names_it() -> None:
    """The caller never sent sites_exclude: an error saying only 'fix the named fields'
    leaves it nothing it sent to fix."""
    task = ResourceEnvelope.model_validate({"sites_exclude": ["devdelta"]})
    with pytest.raises(ValidationFailed) as caught:
        merge_envelope(task, ResourceEnvelope.model_validate({"sites_include": ["devdelta"]}))
    assert "sites_exclude" in caught.value.hint and "unchanged" in caught.value.hint
