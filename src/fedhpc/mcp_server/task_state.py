"""fedhpc work as a Tasks-extension task (`io.modelcontextprotocol/tasks`, 2026-07-28).

A handle is `<kind>.<fedhpc id>.<mac>`: the kind (t task, g group, x transfer), the id fedhpc
answered, and an HMAC over both and the MCP session that made it, with the key kept in the
fedhpc home (`task_key`): a new server process on the same home resolves a handle the old one
minted, wherever the session survives it (stateless 2026-07-28 HTTP; a stdio session is its
process, an HTTP session id ends with its server). Another session's handle (or a bare fedhpc
id) fails the check and reads as "not found", the same answer as an id that does not exist:
nothing tells the two apart.

`detailed_task` builds the spec's DetailedTask for any handle from the daemon's state (the
table is in docs/mcp.md, "Tasks extension"); tasks/get and notifications/tasks both send it."""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.domain.job import JobState
from fedhpc.errors import ErrorKind, FedError
from fedhpc.mcp_server.link import DaemonLink
from fedhpc.mcp_server.results import answer_result
from fedhpc.mcp_server.task_key import task_key
from fedhpc.ops.data import TransferRequest, TransferState
from fedhpc.ops.task_views import ResultManifest
from fedhpc.ops.tasks import ResultRequest

__all__ = [
    "EXTENSION",
    "TASK_TOOLS",
    "Handle",
    "TaskNotFound",
    "detailed_task",
    "mint",
    "owner_of",
    "parse",
]

EXTENSION = "io.modelcontextprotocol/tasks"
Kind = Literal["t", "g", "x"]
# The tools whose answer becomes a task handle, and the answer field holding the fedhpc id.
TASK_TOOLS: dict[str, tuple[Kind, str]] = {
    "submit_task": ("t", "task_id"),
    "submit_group": ("g", "group_id"),
    "move_data": ("x", "transfer_id"),
}
_MAC_HEX = 16
_MAX_POLL_S = 900.0  # a client that polls anyway asks at least every 15 min
STATUS = Literal["working", "completed", "failed", "cancelled"]


class TaskNotFound(FedError):
    code = "not_found"
    kind = ErrorKind.NOT_FOUND
    default_hint = (
        "Pass a taskId this session received from a task-augmented tools/call; fedhpc ids "
        "(task_id, group_id, transfer_id) are read with get_result or the fedhpc:// resources."
    )


@dataclass(frozen=True)
class Handle:
    kind: Kind
    fid: str

    @property
    def uri(self) -> str:
        what = {"t": "tasks", "g": "groups", "x": "transfers"}[self.kind]
        return f"fedhpc://{what}/{self.fid}"


def owner_of(ctx: ServerRequestContext[Any, Any]) -> str:
    """The MCP session a request belongs to: its HTTP session id; every client of a stateless
    HTTP server (any server process on this home); else this stdio connection (this process)."""
    headers = getattr(ctx.request, "headers", None)
    if not isinstance(headers, Mapping):
        return f"stdio:{os.getpid()}"
    session = headers.get("mcp-session-id")
    return f"http:{session}" if isinstance(session, str) and session else "http"


def _mac(kind: str, fid: str, owner: str) -> str:
    msg = f"{kind}\x00{fid}\x00{owner}".encode()
    return hmac.new(task_key(), msg, hashlib.sha256).hexdigest()[:_MAC_HEX]


def mint(kind: Kind, fid: str, owner: str) -> str:
    return f"{kind}.{fid}.{_mac(kind, fid, owner)}"


def parse(task_id: str, owner: str) -> Handle:
    """The handle, or TaskNotFound as a JSON-RPC invalid-params error (the spec's answer)."""
    parts = task_id.split(".") if len(task_id) <= 128 else []
    if len(parts) == 3 and parts[0] in ("t", "g", "x"):
        kind, fid, mac = parts
        if hmac.compare_digest(mac, _mac(kind, fid, owner)):
            return Handle(kind, fid)  # type: ignore[arg-type]
    err = TaskNotFound(f"Failed to retrieve task: no task {task_id[:80]!r} in this session")
    raise MCPError(INVALID_PARAMS, err.message, data=err.as_dict())


def _iso(at: datetime | None) -> str:
    return (at or datetime.now(UTC)).astimezone(UTC).isoformat().replace("+00:00", "Z")


def _poll_s(manifest: ResultManifest | None, refresh_s: float, now: datetime) -> float:
    """The predicted time left, a quarter of it, never below the collector's refresh: a
    running job's wall-time bound minus what it ran; a queued one's wait so far (the best
    predictor of the wait to come) plus its wall-time bound."""
    left = 4 * refresh_s
    if manifest is not None and manifest.attempts:
        a = manifest.attempts[-1]
        wall = float(a.shape.wall_time_s) if a.shape is not None else 4 * refresh_s
        if a.started_at is not None:
            left = max(wall - (now - a.started_at).total_seconds(), 0.0)
        elif a.submitted_at is not None:
            left = (now - a.submitted_at).total_seconds() + wall
    return min(max(refresh_s, left / 4), max(_MAX_POLL_S, refresh_s))


_TASK_STATUS: dict[JobState, STATUS] = {
    JobState.COMPLETED: "completed",
    JobState.FAILED: "completed",
    JobState.TIMEOUT: "completed",
    JobState.UNSCHEDULABLE: "completed",
    JobState.CANCELLED: "cancelled",
}
_GROUP_STATUS: dict[str, STATUS] = {
    "completed": "completed",
    "failed": "completed",
    "cancelled": "cancelled",
}


def _tool_result(answer: Any, failed: bool) -> dict[str, Any]:
    body: dict[str, Any] = answer_result(answer).model_dump(
        by_alias=True, mode="json", exclude_none=True
    )
    if failed:
        body["isError"] = True
    # structuredContent stays: the tool declares an output schema, and clients (the SDK's)
    # refuse a result without it; the answer's fields fit the schema of the submit tool's.
    body.pop("resultType", None)
    return body


async def _task(c: DaemonClient, fid: str, refresh_s: float) -> dict[str, Any]:
    brief = await c.get_result(ResultRequest(task_id=fid, brief=True))
    status = _TASK_STATUS.get(brief.state, "working")
    out: dict[str, Any] = {"status": status, "createdAt": _iso(brief.created_at)}
    if status == "working":
        full = await c.get_result(ResultRequest(task_id=fid, preview="none"))
        out["pollIntervalMs"] = int(1000 * _poll_s(full, refresh_s, datetime.now(UTC)))
        site = full.attempts[-1].site if full.attempts else None
        out["statusMessage"] = f"{brief.state.value}" + (f" at {site}" if site else "")
    elif status == "completed":
        failed = brief.state is not JobState.COMPLETED
        out["result"] = _tool_result(brief, failed)
        out["statusMessage"] = brief.state.value
    else:
        out["statusMessage"] = "cancelled"
    return out


async def _group(c: DaemonClient, fid: str, refresh_s: float) -> dict[str, Any]:
    view = await c.group(fid, limit=1)
    status = _GROUP_STATUS.get(view.state, "working")
    counts = ",".join(f"{k}={v}" for k, v in sorted(view.counts.items()))
    out: dict[str, Any] = {"status": status, "statusMessage": f"{view.state} {counts}"}
    if status == "working":
        out["pollIntervalMs"] = int(1000 * 4 * refresh_s)
    elif status == "completed":
        brief = view.model_copy(update={"children": (), "omitted": view.size})
        out["result"] = _tool_result(brief, view.state == "failed")
    return out


async def _transfer(c: DaemonClient, fid: str, refresh_s: float) -> dict[str, Any]:
    view = await c.transfer(TransferRequest(transfer_id=fid))
    out: dict[str, Any] = {"createdAt": _iso(view.created_at), "statusMessage": view.state.value}
    if not view.state.terminal:
        out |= {"status": "working", "pollIntervalMs": int(1000 * max(refresh_s, 10.0))}
    else:
        out |= {"status": "completed"}
        out["result"] = _tool_result(view, view.state is TransferState.FAILED)
    return out


async def detailed_task(link: DaemonLink, task_id: str, handle: Handle) -> dict[str, Any]:
    """The spec's DetailedTask (without `resultType`) for a handle, from the daemon now."""
    refresh_s = float(link.settings.refresh_s)
    read = {"t": _task, "g": _group, "x": _transfer}[handle.kind]
    try:
        body = await link.call(lambda c: read(c, handle.fid, refresh_s))
    except FedError as exc:
        if exc.code == "not_found":
            raise MCPError(INVALID_PARAMS, exc.message, data=exc.as_dict()) from exc
        raise
    now = _iso(None)
    return {
        "taskId": task_id,
        "createdAt": now,
        "lastUpdatedAt": now,
        "ttlMs": None,  # fedhpc keeps its work's record: unlimited
        **body,
    }
