"""The task contract's answers: a task's handle, its result manifest and attempts, a group's
view (the requests: ops/tasks.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from fedhpc.domain.job import JobState, Shape
from fedhpc.ops.data import TransferProvenance
from fedhpc.ops.scripts import ScriptReading

__all__ = [
    "GROUP_PAGE",
    "GROUP_PAGE_MAX",
    "AttemptView",
    "ChildView",
    "GroupView",
    "OutputRef",
    "Provenance",
    "ResultManifest",
    "SubmitAnswer",
    "TaskHandle",
    "TaskSummary",
]


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)


_WHOLE = "absent in submit_task's MCP answer: read fedhpc://tasks/{task_id}"
_ONE = "brief form, one job only (attempts then empty): that job's"


class TaskHandle(_Out):
    """The immediate answer of submit_task, replan and cancel."""

    task_id: str
    state: JobState
    site: str | None = None
    partition: str | None = None
    account: str | None = Field(default=None, description=_WHOLE)
    shape: Shape | None = Field(default=None, description=_WHOLE)
    job_id: str | None = None
    attempt: int = 0
    decision: str = Field(default="", description="why this placement, in one line")
    reasons: tuple[str, ...] = Field(default=(), description="why it cannot run, if it cannot")
    transfers: tuple[str, ...] = Field(default=(), description="stage-out transfer ids")
    existing: str | None = Field(
        default=None, description="set when this call matched an earlier submission"
    )
    next: str = Field(default="", description="what to do now (empty on a group's children)")

    def brief(self) -> TaskHandle:
        """submit_task's MCP answer: without what the agent asked for itself (the shape
        within its envelope, the account); the task resource and `fedhpc task` have them. A
        replan's answer keeps the shape: it is what a new envelope changed."""
        return self.model_copy(update={"account": None, "shape": None})


class SubmitAnswer(TaskHandle):
    """submit_task's answer: the handle, and what a job script's header gave (if one came)."""

    script: ScriptReading | None = None


class AttemptView(_Out):
    """One scheduler job of a task."""

    n: int
    site: str
    partition: str
    state: JobState
    account: str | None = None
    qos: str | None = None
    shape: Shape | None = Field(default=None, description="absent in get_result's brief form")
    job_name: str = ""
    job_id: str | None = None
    reason: str | None = None
    superseded: bool = False
    submitted_at: datetime | None = None
    eligible_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    wait_s: float | None = None
    runtime_s: float | None = None
    exit_code: int | None = None
    predicted_wait_s: float | None = Field(
        default=None, description="the queue wait its placement predicted, from submission"
    )
    copy_of: int | None = Field(
        default=None, description="a hedged copy: the attempt it was submitted beside"
    )
    outrun_by: int | None = Field(
        default=None, description="a hedged copy cancelled: the attempt that started or ended first"
    )


class OutputRef(_Out):
    """A file a task produced, by reference: never its content unless asked, and bounded."""

    kind: Literal["stdout", "stderr", "artifact"]
    path: str
    site: str | None = Field(default=None, description="absent: the current attempt's site")
    bytes: int | None = None


class Provenance(_Out):
    """Where the envelope came from and why the placement was chosen."""

    envelope_source: str
    rationale: str = ""
    confidence: float | None = None
    policy: str
    decision: str
    candidates: int
    feasible: int
    pruned: int = Field(
        default=0,
        description="partitions not scored: failing a rule by class, or unable to rank",
    )


class ResultManifest(_Out):
    """The compact answer of get_result."""

    task_id: str
    state: JobState
    name: str | None = None
    group_id: str | None = None
    created_at: datetime | None = None
    attempts: tuple[AttemptView, ...] = ()
    # get_result's brief form, when the task has had one job and it is in the task's state
    # (no reason of its own): that job's fields here, and `attempts` empty.
    site: str | None = Field(default=None, description=_ONE)
    partition: str | None = Field(default=None, description=_ONE)
    job_id: str | None = Field(default=None, description=_ONE)
    wait_s: float | None = Field(default=None, description=_ONE)
    runtime_s: float | None = Field(default=None, description=_ONE)
    exit_code: int | None = Field(default=None, description=_ONE)
    provenance: Provenance | None = None
    outputs: tuple[OutputRef, ...] = ()
    preview: str | None = Field(default=None, description="the last bytes of stdout (or asked)")
    truncated: bool = Field(default=False, description="preview omits earlier bytes")
    stderr: str | None = Field(
        default=None, description="the last bytes of stderr, on failure (its size: outputs)"
    )
    reasons: tuple[str, ...] = ()
    waiting: str | None = Field(
        default=None,
        description="not started: why (fedhpc's hold, the scheduler's reason) and when it "
        "may start",
    )
    data: tuple[TransferProvenance, ...] = Field(default=(), description="stage-in/out transfers")
    unreadable: str | None = Field(
        default=None, description="the site holding the output, unreadable now (next says why)"
    )
    next: str = ""


class TaskSummary(_Out):
    """One line of `fedhpc tasks`."""

    task_id: str
    name: str | None
    state: JobState
    site: str | None
    partition: str | None
    job_id: str | None
    attempts: int
    group_id: str | None
    updated_at: datetime

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> TaskSummary:
        """A row of the store's task listing (`task_listing`, `task_page`): its task and its
        current attempt as get_result picks it."""
        cur = row["attempt"] or {}
        return cls(
            task_id=row["id"],
            name=row["name"],
            state=JobState(row["state"]),
            site=cur.get("site"),
            partition=cur.get("partition"),
            job_id=cur.get("job_id"),
            attempts=row["attempts"],
            group_id=row["group_id"],
            updated_at=datetime.fromisoformat(str(row["updated_at"])),
        )


class ChildView(_Out):
    """One child of a group, where it is now."""

    task_id: str
    name: str | None = None
    state: JobState
    site: str | None = None
    partition: str | None = None
    job_id: str | None = None
    decision: str = ""
    reasons: tuple[str, ...] = ()


GROUP_PAGE = 200  # children per page of the group view (GET /v1/groups/{id}, the resource)
GROUP_PAGE_MAX = 1000


class GroupView(_Out):
    """The group-level view: one answer for all children, bounded whatever the group's size."""

    group_id: str
    objective: str
    state: Literal["placing", "running", "completed", "failed", "cancelled"] = Field(
        description="placing: some children are still queued in fedhpc"
    )
    round: int
    size: int = Field(description="number of children")
    child_ids: str = Field(description="child i has the id <group prefix>-<i>: first … last")
    counts: dict[str, int] = Field(description="children per state")
    sites: dict[str, int] = Field(default_factory=dict, description="placed children per site")
    children: tuple[ChildView, ...]
    omitted: int = Field(
        default=0,
        description="children not listed here: read fedhpc://groups/{id} (pages of "
        f"{GROUP_PAGE}; next_after names the next page)",
    )
    next_after: str | None = Field(
        default=None,
        description="more children follow: read fedhpc://groups/{id}/after/{next_after} "
        "(REST: ?after=)",
    )
    existing: str | None = Field(
        default=None, description="set when this call matched an earlier submission"
    )
    next: str = ""
