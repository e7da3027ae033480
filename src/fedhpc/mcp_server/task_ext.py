"""The Tasks extension (`io.modelcontextprotocol/tasks`) through the SDK's extension interface
(SEP-2133): submit_task, submit_group and move_data answer a 2026-07-28 client that declares
it with a task handle (`resultType: "task"`); tasks/get, tasks/cancel and tasks/update serve
the handle. mcp 2.3 carries the types only; this is the behaviour (docs/mcp.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import require_client_extension
from mcp.shared.exceptions import MCPError
from mcp.types import INTERNAL_ERROR, CallToolRequestParams, CallToolResult, RequestParams
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, Field

from fedhpc.errors import ErrorKind, FedError
from fedhpc.mcp_server.link import DaemonLink
from fedhpc.mcp_server.task_state import (
    EXTENSION,
    TASK_TOOLS,
    detailed_task,
    mint,
    owner_of,
    parse,
)
from fedhpc.mcp_server.task_stream import declared
from fedhpc.ops.tasks import CancelRequest

__all__ = ["TasksExtension"]

_MODERN = frozenset(MODERN_PROTOCOL_VERSIONS)
Ctx = ServerRequestContext[DaemonLink, Any]


class TaskParams(RequestParams):
    task_id: str = Field(alias="taskId", max_length=200)


class UpdateParams(TaskParams):
    input_responses: dict[str, Any] = Field(default_factory=dict, alias="inputResponses")


def _rpc(exc: FedError) -> MCPError:
    code = -32602 if exc.kind in (ErrorKind.NOT_FOUND, ErrorKind.USAGE) else INTERNAL_ERROR
    return MCPError(code, exc.message, data=exc.as_dict())


def _dump(result: HandlerResult) -> dict[str, Any] | None:
    if isinstance(result, CallToolResult):
        return result.model_dump(by_alias=True, mode="json", exclude_none=True)
    if isinstance(result, BaseModel):
        return None
    return result


class TasksExtension(Extension):
    identifier = EXTENSION

    def methods(self) -> Sequence[MethodBinding]:
        return (
            MethodBinding("tasks/get", TaskParams, self._get, protocol_versions=_MODERN),
            MethodBinding("tasks/cancel", TaskParams, self._cancel, protocol_versions=_MODERN),
            MethodBinding("tasks/update", UpdateParams, self._update, protocol_versions=_MODERN),
        )

    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: Ctx, call_next: CallNext
    ) -> HandlerResult:
        spec = TASK_TOOLS.get(params.name)
        if spec is None or ctx.protocol_version not in _MODERN or not declared(ctx):
            return await call_next(ctx)
        result = await call_next(ctx)
        body = _dump(result)
        content = body.get("structuredContent") if body and not body.get("isError") else None
        if not isinstance(content, dict) or not isinstance(content.get(spec[1]), str):
            return result  # an error (or an answer without an id): nothing to wait for
        kind, fid = spec[0], content[spec[1]]
        task_id = mint(kind, fid, owner_of(ctx))
        try:
            task = await detailed_task(ctx.lifespan_context, task_id, parse(task_id, owner_of(ctx)))
        except FedError:
            return result  # accepted, but unreadable now: the plain answer still holds the id
        task.pop("result", None)  # a CreateTaskResult is a Task: the outcome comes by tasks/get
        task.setdefault("statusMessage", "")
        task["statusMessage"] = f"{fid} {task['statusMessage']}".strip()
        return {"resultType": "task", **task}

    async def _get(self, ctx: Ctx, params: TaskParams) -> dict[str, Any]:
        require_client_extension(ctx, EXTENSION)
        handle = parse(params.task_id, owner_of(ctx))
        try:
            return await detailed_task(ctx.lifespan_context, params.task_id, handle)
        except FedError as exc:
            raise _rpc(exc) from exc

    async def _cancel(self, ctx: Ctx, params: TaskParams) -> dict[str, Any]:
        """A task or a group (every live child) is cancelled; a transfer cannot be stopped
        once handed to its backend, so its cancel is acknowledged and it runs on (the spec
        lets a server decline: cancellation is cooperative)."""
        require_client_extension(ctx, EXTENSION)
        handle = parse(params.task_id, owner_of(ctx))
        if handle.kind != "x":
            req = CancelRequest(task_id=handle.fid)
            try:
                await ctx.lifespan_context.call(lambda c: c.cancel(req))
            except FedError as exc:
                raise _rpc(exc) from exc
        return {}

    async def _update(self, ctx: Ctx, params: UpdateParams) -> dict[str, Any]:
        """fedhpc tasks never ask for input (no `input_required`): every response is for a
        key that is not outstanding, which the spec says to ignore."""
        require_client_extension(ctx, EXTENSION)
        parse(params.task_id, owner_of(ctx))
        return {}
