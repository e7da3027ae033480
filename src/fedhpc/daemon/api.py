"""The daemon's REST API as one table: every route's method, path and name, and the models of
its query or body and of its answer. The app (daemon/app.py) mounts exactly these routes and the
client (fedhpc/client/daemon_client.py) builds its requests from them, so a path is written once.

Pure data (pydantic, no starlette): the CLI and the MCP server import it through the client."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field

from fedhpc.domain.job import JobState
from fedhpc.domain.units import UtcDatetime
from fedhpc.ops.continuations import ContinuationSpec, ToolBinding
from fedhpc.ops.data import MoveDataRequest, TransferHandle, TransferRequest, TransferView
from fedhpc.ops.draft import DraftRequest, EnvelopeDraft
from fedhpc.ops.events import AckRequest, ArchiveRequest, EventsQuery
from fedhpc.ops.inspect import FederationView, InspectRequest
from fedhpc.ops.scripts import ScriptFile, ScriptFileRequest
from fedhpc.ops.task_views import GROUP_PAGE, GROUP_PAGE_MAX, GroupView, ResultManifest, TaskHandle
from fedhpc.ops.tasks import ReplanRequest, ResultRequest, SubmitGroupRequest, SubmitTaskRequest

__all__ = [
    "ACK_EVENTS",
    "ARCHIVE_EVENTS",
    "BINDING",
    "CANCEL",
    "DELIVERIES",
    "DRAFT_ENVELOPE",
    "ESTIMATORS",
    "EVENTS",
    "FEDERATION",
    "GET_RESULT",
    "GROUP",
    "GROUPS",
    "HEALTH",
    "HISTORY",
    "MAX_POINTS",
    "MOVE_DATA",
    "OUTLOOK",
    "READ_SCRIPT",
    "REFRESH",
    "REGISTER_CONTINUATION",
    "REPLAN",
    "REPORT_BINDING",
    "RETRY_DELIVERIES",
    "ROUTES",
    "SUBMIT_GROUP",
    "SUBMIT_TASK",
    "TASKS",
    "TRANSFER",
    "Endpoint",
    "GroupQuery",
    "GroupsQuery",
    "HistoryQuery",
    "Redrive",
    "RegisterContinuation",
    "TasksQuery",
]

MAX_POINTS = 240  # per site and call: each probe is parsed (a few KB) then reduced to ~200 B
MAX_GROUPS_LISTED = 100  # GET /v1/groups: each group's counts are one SQL read
MAX_OFFSET = 10_000_000  # GET /v1/tasks and /v1/groups: a page this far down the listing

_PARAM = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class Endpoint:
    """One route: `request` is the model of its body (POST) or query (GET), when it has one."""

    method: Literal["GET", "POST"]
    path: str  # a starlette path template: `{name}` is one path segment
    name: str
    request: type[BaseModel] | None = None
    response: type[BaseModel] | None = None

    def url(self, *ids: str) -> str:
        """The path with `ids` in its `{...}` segments, each quoted as one segment (an id never
        reaches another route: '/', '?' and control characters are escaped)."""
        names = _PARAM.findall(self.path)
        if len(ids) != len(names):
            raise TypeError(f"{self.name} takes {len(names)} path parameter(s), got {len(ids)}")
        values = iter(ids)
        return _PARAM.sub(lambda _: quote(next(values), safe=""), self.path)


class TasksQuery(BaseModel):
    """Query of GET /v1/tasks."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    state: JobState | None = None
    limit: int = Field(default=100, ge=1, le=1000)
    offset: int | None = Field(
        default=None,
        ge=0,
        le=MAX_OFFSET,
        description="a page: skip this many of the listing (newest first); the answer has "
        "`total`, how many tasks the listing holds (the dashboard's paging)",
    )
    find: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="only tasks whose id, name or group, or a site one of its attempts went "
        "to, holds this text (any case); a page with `total`, as `offset`",
    )


class GroupQuery(BaseModel):
    """GET /v1/groups/{id}: a page of children (counts always cover the whole group)."""

    model_config = ConfigDict(extra="forbid")

    after: str | None = Field(default=None, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    limit: int = Field(default=GROUP_PAGE, ge=1, le=GROUP_PAGE_MAX)


class GroupsQuery(BaseModel):
    """GET /v1/groups: the newest groups, each with its counts (no child listed)."""

    model_config = ConfigDict(extra="forbid")

    limit: int = Field(default=20, ge=1, le=MAX_GROUPS_LISTED)
    offset: int = Field(default=0, ge=0, le=MAX_OFFSET, description="skip the newest N groups")


class HistoryQuery(BaseModel):
    """Query of GET /v1/federation/history."""

    model_config = ConfigDict(extra="forbid")

    site: list[str] = Field(default=[], max_length=64, description="only these sites")
    limit: int = Field(default=120, ge=1, le=MAX_POINTS, description="newest probes per site")
    before: UtcDatetime | None = Field(
        default=None, description="only probes older than this (naive = UTC)"
    )
    credit: bool = Field(
        default=False, description="each probe's credit per account instead of its partitions"
    )


class RegisterContinuation(BaseModel):
    """POST /v1/continuations: wake `spec` for events of an existing task, group or transfer."""

    model_config = ConfigDict(extra="forbid")

    subject: str = Field(min_length=1, max_length=64)
    spec: ContinuationSpec


class Redrive(BaseModel):
    """POST /v1/deliveries/retry: dead deliveries back to pending (these ids, or all dead)."""

    model_config = ConfigDict(extra="forbid")

    ids: list[str] = Field(default=[], max_length=1000)
    all_dead: bool = False


# Resume bridge: continuations, hook-reported tool-call bindings, deliveries.
REGISTER_CONTINUATION = Endpoint(
    "POST", "/v1/continuations", "register_continuation", RegisterContinuation
)
REPORT_BINDING = Endpoint("POST", "/v1/bindings", "report_binding", ToolBinding)
BINDING = Endpoint("GET", "/v1/bindings/{tool_use_id}", "binding", None, ToolBinding)
DELIVERIES = Endpoint("GET", "/v1/deliveries", "deliveries")
RETRY_DELIVERIES = Endpoint("POST", "/v1/deliveries/retry", "retry_deliveries", Redrive)
# Tasks, groups, envelopes.
ESTIMATORS = Endpoint("GET", "/v1/estimators", "estimators")
ARCHIVE_EVENTS = Endpoint("POST", "/v1/events/archive", "archive_events", ArchiveRequest)
SUBMIT_TASK = Endpoint("POST", "/v1/tasks", "submit_task", SubmitTaskRequest, TaskHandle)
TASKS = Endpoint("GET", "/v1/tasks", "tasks", TasksQuery)
GET_RESULT = Endpoint("GET", "/v1/tasks/{task_id}", "get_result", ResultRequest, ResultManifest)
CANCEL = Endpoint("POST", "/v1/tasks/{task_id}/cancel", "cancel", None, TaskHandle)
REPLAN = Endpoint("POST", "/v1/tasks/{task_id}/replan", "replan", ReplanRequest, TaskHandle)
SUBMIT_GROUP = Endpoint("POST", "/v1/groups", "submit_group", SubmitGroupRequest, GroupView)
GROUP = Endpoint("GET", "/v1/groups/{group_id}", "group", GroupQuery, GroupView)
GROUPS = Endpoint("GET", "/v1/groups", "groups", GroupsQuery)
DRAFT_ENVELOPE = Endpoint(
    "POST", "/v1/envelopes/draft", "draft_envelope", DraftRequest, EnvelopeDraft
)
READ_SCRIPT = Endpoint("POST", "/v1/scripts/read", "read_script", ScriptFileRequest, ScriptFile)
# Events, health, the federation.
ACK_EVENTS = Endpoint("POST", "/v1/events/ack", "ack_events", AckRequest)
HEALTH = Endpoint("GET", "/v1/health", "health")
FEDERATION = Endpoint("GET", "/v1/federation", "federation", InspectRequest, FederationView)
REFRESH = Endpoint("POST", "/v1/refresh", "refresh", InspectRequest, FederationView)
EVENTS = Endpoint("GET", "/v1/events", "events", EventsQuery)
# Data movement.
MOVE_DATA = Endpoint("POST", "/v1/transfers", "move_data", MoveDataRequest, TransferHandle)
TRANSFER = Endpoint("GET", "/v1/transfers/{transfer_id}", "transfer", TransferRequest, TransferView)
HISTORY = Endpoint("GET", "/v1/federation/history", "history", HistoryQuery)
# The wait placement predicts now per partition for 1 GPU, 1 node, 4 GPUs (placement.outlook).
OUTLOOK = Endpoint("GET", "/v1/federation/outlook", "outlook")
LEDGER = Endpoint("GET", "/v1/ledger", "ledger")

# Mounted in this order.
ROUTES: tuple[Endpoint, ...] = (
    REGISTER_CONTINUATION,
    REPORT_BINDING,
    BINDING,
    DELIVERIES,
    RETRY_DELIVERIES,
    ESTIMATORS,
    ARCHIVE_EVENTS,
    SUBMIT_TASK,
    TASKS,
    GET_RESULT,
    CANCEL,
    REPLAN,
    SUBMIT_GROUP,
    GROUP,
    GROUPS,
    DRAFT_ENVELOPE,
    READ_SCRIPT,
    ACK_EVENTS,
    HEALTH,
    FEDERATION,
    REFRESH,
    EVENTS,
    MOVE_DATA,
    TRANSFER,
    HISTORY,
    LEDGER,
    OUTLOOK,
)
