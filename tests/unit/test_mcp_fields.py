"""get_result's `fields`: only the named fields of the answer (and the ids that name it)."""

from __future__ import annotations

import pytest

from fedhpc.domain.job import JobState
from fedhpc.errors import ValidationFailed
from fedhpc.mcp_server.results import answer_result, compact, project
from fedhpc.ops.task_views import AttemptView, ResultManifest

FULL = ResultManifest(
    task_id="t1",
    state=JobState.COMPLETED,
    name="score",
    attempts=(AttemptView(n=1, site="delta", partition="gpu", state=JobState.COMPLETED),),
    preview="hello\n",
    next="Completed: preview is all of its output.",
)


def test_only_the_named_fields_and_the_required_ones_stay() -> None:
    assert compact(project(FULL, ["preview"])) == {
        "task_id": "t1",
        "state": "completed",
        "preview": "hello\n",
    }
    assert project(FULL, []) is FULL
    small = answer_result(project(FULL, ["preview", "next"]))
    assert len(small.content[0].text) < len(answer_result(FULL).content[0].text)  # type: ignore[union-attr]


def test_an_unknown_field_is_a_validation_error_naming_it_and_the_fields() -> None:
    with pytest.raises(ValidationFailed) as bad:
        project(FULL, ["preview", "stdout"])
    body = bad.value.as_dict()
    assert body["code"] == "validation"
    [issue] = body["fields"]
    assert issue["field"] == "fields[1]"
    assert "'stdout'" in issue["reason"] and "preview" in issue["reason"]
