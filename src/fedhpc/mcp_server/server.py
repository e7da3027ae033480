"""`build_server`: the MCP face of fedhpc, a stateless client of the daemon."""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from functools import partial
from typing import Any

import anyio
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.tools import Tool
from mcp.server.subscriptions import InMemorySubscriptionBus
from mcp.shared.exceptions import MCPError
from mcp.types import INTERNAL_ERROR, INVALID_PARAMS, SubscriptionsListenRequestParams
from pydantic import BaseModel, ValidationError

from fedhpc import __version__
from fedhpc.client.daemon_client import DaemonClient
from fedhpc.errors import ErrorKind, FedError, FieldIssue, ValidationFailed
from fedhpc.mcp_server.link import DaemonLink, open_link
from fedhpc.mcp_server.lowlevel import replace_handler
from fedhpc.mcp_server.params import ID_PATTERN
from fedhpc.mcp_server.results import UnknownTool, arguments_error, error_result
from fedhpc.mcp_server.schema import compact_input, compact_output
from fedhpc.mcp_server.service_http import scope_guard
from fedhpc.mcp_server.task_ext import TasksExtension
from fedhpc.mcp_server.task_stream import EventWatch, TaskListen
from fedhpc.mcp_server.tools import ANNOTATIONS, TOOLS
from fedhpc.ops.data import TransferRequest
from fedhpc.ops.suggest import unknown_field_reason
from fedhpc.ops.tasks import ResultRequest
from fedhpc.service import ServiceAuth
from fedhpc.settings.daemon import DaemonSettings

__all__ = ["INSTRUCTIONS", "build_server", "build_tools"]

INSTRUCTIONS = """\
fedhpc runs jobs on several supercomputers as one workspace. Work in this loop:
1. Observe: inspect_federation (health, free GPUs, queues, credit per site).
2. Plan: draft_envelope gives min-viable/max-useful bounds; check them.
3. Act: submit_task (one job) or submit_group (a sweep); fedhpc picks site and shape.
4. Yield: do what the answer's `next` says: end your turn when fedhpc will resume you,
   else it says how to read the outcome. Do not poll: fedhpc watches the jobs.
5. Resume: you are continued with the outcome or a decision to make; read it with
   get_result, then replan or cancel if needed. Pull-only clients: list_events, ack_events.
Errors come back as {code, message, hint}; a validation error names the field.
Data moves site to site with move_data (never through you); a task's stage_in waits for it."""


# In answers the nested records (a site's partitions, an attempt, an envelope, ...) are plain
# objects: the answer's own fields are typed, the records' keys speak for themselves (and the
# text content carries them), and typing them in full cost ~6 KB of tools/list, the room the
# tools' parameters need (see docs/mcp.md).


def build_tools() -> list[Tool]:
    """The tools with honest annotations and compacted schemas (structure unchanged)."""
    tools = []
    for fn in TOOLS:
        description = " ".join(inspect.cleandoc(fn.__doc__ or "").split())
        tool = Tool.from_function(fn, description=description, annotations=ANNOTATIONS[fn.__name__])
        tool.parameters = compact_input(tool.parameters)
        if tool.fn_metadata.output_schema is not None:
            schema = tool.fn_metadata.output_schema
            records = schema.get("$defs", {}).items()
            nested = frozenset(n for n, d in records if "properties" in d)  # not enums
            tool.fn_metadata.output_schema = compact_output(schema, nested)
        tools.append(tool)
    return tools


def _arguments_guard(tools: Mapping[str, Tool]) -> Any:
    """Validate `tools/call` arguments before the SDK does, so the failure is typed.

    The SDK would answer the same arguments with free text; this answers with
    `{code: "validation", message, hint, fields: [{field, reason}]}`."""

    async def middleware(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        params = ctx.params
        if ctx.method != "tools/call" or not isinstance(params, Mapping):
            return await call_next(ctx)
        name, arguments = params.get("name"), params.get("arguments")
        if not isinstance(name, str) or not isinstance(arguments, Mapping | None):
            return await call_next(ctx)  # malformed params: the SDK's JSON-RPC error is right
        tool = tools.get(name)
        if tool is None:
            return error_result(
                UnknownTool(f"no tool named {name[:64]!r}", hint=f"Tools: {', '.join(tools)}.")
            )
        model = tool.fn_metadata.arg_model
        unknown = sorted(set(arguments or {}) - set(model.model_fields))
        if unknown:  # the SDK would drop them silently: say which parameter was meant
            issues = [FieldIssue(k or '""', unknown_field_reason(model, (k,))) for k in unknown]
            return error_result(
                ValidationFailed(issues, hint=f"Fix the named fields of {name} and call it again.")
            )
        try:
            tool.fn_metadata.validate_arguments(dict(arguments or {}))
        except ValidationError as exc:
            return arguments_error(name, exc, model)
        return await call_next(ctx)

    return middleware


def build_server(
    settings: DaemonSettings | None = None,
    *,
    autostart: bool = True,
    daemon_wait_s: float = 0.0,
    service: ServiceAuth | None = None,
) -> MCPServer:
    """The server; each run (stdio connection, or the HTTP manager) opens one daemon link.
    Without `autostart`, a call waits up to `daemon_wait_s` for a daemon to answer. With
    `service`, HTTP callers need a provider's token and each tool its scope (docs/service.md)."""
    resolved = settings or DaemonSettings.from_env()
    link_to = partial(open_link, resolved, autostart=autostart, wait_s=daemon_wait_s)
    bus = InMemorySubscriptionBus()
    listen = TaskListen(bus)

    @asynccontextmanager
    async def lifespan(_: MCPServer[DaemonLink]) -> AsyncIterator[DaemonLink]:
        async with link_to() as link, anyio.create_task_group() as tg:
            listen.watch = EventWatch(link)  # the task stream's reader of the event log
            tg.start_soon(listen.watch.run, name="fedhpc-event-watch")
            yield link
            tg.cancel_scope.cancel()

    tools = build_tools()
    server: MCPServer[DaemonLink] = MCPServer(
        "fedhpc",
        instructions=INSTRUCTIONS,
        version=__version__,
        tools=tools,
        lifespan=lifespan,
        log_level="WARNING",
        middleware=[
            *([scope_guard] if service else []),
            _arguments_guard({t.name: t for t in tools}),
        ],
        auth=service.settings if service else None,
        token_verifier=service.verifier if service else None,
        extensions=[TasksExtension()],
        subscriptions=bus,
    )
    # The SDK's listen handler knows no `taskIds` (Tasks extension): ours serves both.
    replace_handler(server, "subscriptions/listen", SubscriptionsListenRequestParams, listen)
    _add_resources(server, link_to)
    return server


# A read the client could fix (a malformed or unknown id) is "invalid params", as the SDK's
# own ResourceNotFoundError (SEP-2164); the daemon being down or a bug is an internal error.
_CALLER_KINDS = {ErrorKind.USAGE, ErrorKind.VALIDATION, ErrorKind.NOT_FOUND, ErrorKind.TOO_LARGE}


def _resource_error(exc: FedError, uri: str) -> MCPError:
    """A typed error as a resources/read JSON-RPC error: resources have no `isError` result,
    so the message is the error's own and `data` holds the body a tool would answer
    ({code, message, hint[, fields]}) plus the uri, for a client to read as JSON."""
    code = INVALID_PARAMS if exc.kind in _CALLER_KINDS else INTERNAL_ERROR
    return MCPError(code=code, message=exc.message, data={**exc.as_dict(), "uri": uri})


def _checked_id(value: str, field: str, uri: str) -> str:
    if not re.fullmatch(ID_PATTERN, value) or len(value) > 64:
        why = f"not an id: {value[:64]!r} (ids are what fedhpc answered, e.g. 'g1a2b3c4d5e6')"
        raise _resource_error(ValidationFailed([FieldIssue(field, why)]), uri)
    return value


def _add_resources(
    server: MCPServer[DaemonLink],
    link_to: Callable[[], AbstractAsyncContextManager[DaemonLink]],
) -> None:
    def link(ctx: Context[DaemonLink, Any]) -> DaemonLink:
        value: DaemonLink = ctx.request_context.lifespan_context
        return value

    async def read(
        link: DaemonLink, op: Callable[[DaemonClient], Awaitable[BaseModel]], uri: str
    ) -> str:
        try:
            answer = await link.call(op)
        except FedError as exc:  # resources have no is_error: the JSON-RPC error carries it
            raise _resource_error(exc, uri) from exc
        return answer.model_dump_json()

    @server.resource(
        "fedhpc://federation",
        name="federation",
        description="the federation snapshot (as inspect_federation)",
        mime_type="application/json",
    )
    async def federation() -> str:
        # Static resources get no Context in mcp 2.3, so this read opens its own link.
        async with link_to() as fresh:
            return await read(fresh, lambda c: c.federation(), "fedhpc://federation")

    @server.resource(
        "fedhpc://ledger",
        name="ledger",
        description="charges per site account: used by ended attempts, committed by live ones "
        "(a signed-in person's own in service mode)",
        mime_type="application/json",
    )
    async def ledger() -> str:
        async with link_to() as fresh:
            try:
                answer = await fresh.call(lambda c: c.ledger())
            except FedError as exc:
                raise _resource_error(exc, "fedhpc://ledger") from exc
        return json.dumps(answer)

    @server.resource(
        "fedhpc://tasks/{task_id}",
        name="task",
        description="a task's result manifest (as get_result)",
        mime_type="application/json",
    )
    async def task(task_id: str, ctx: Context[DaemonLink, Any]) -> str:
        uri = f"fedhpc://tasks/{task_id}"
        req = ResultRequest(task_id=_checked_id(task_id, "task_id", uri))
        return await read(link(ctx), lambda c: c.get_result(req), uri)

    @server.resource(
        "fedhpc://groups/{group_id}",
        name="group",
        description="a group: counts for all children, and its children in pages (next_after)",
        mime_type="application/json",
    )
    async def group(group_id: str, ctx: Context[DaemonLink, Any]) -> str:
        uri = f"fedhpc://groups/{group_id}"
        checked = _checked_id(group_id, "group_id", uri)
        return await read(link(ctx), lambda c: c.group(checked), uri)

    @server.resource(
        "fedhpc://groups/{group_id}/after/{after}",
        name="group_page",
        description="the next page of a group's children (after the child id `next_after`)",
        mime_type="application/json",
    )
    async def group_page(group_id: str, after: str, ctx: Context[DaemonLink, Any]) -> str:
        uri = f"fedhpc://groups/{group_id}/after/{after}"
        checked, start = _checked_id(group_id, "group_id", uri), _checked_id(after, "after", uri)
        return await read(link(ctx), lambda c: c.group(checked, after=start), uri)

    @server.resource(
        "fedhpc://transfers/{transfer_id}",
        name="transfer",
        description="a transfer (move_data, stage-out): state, bytes, checksums, paths",
        mime_type="application/json",
    )
    async def transfer(transfer_id: str, ctx: Context[DaemonLink, Any]) -> str:
        uri = f"fedhpc://transfers/{transfer_id}"
        req = TransferRequest(transfer_id=_checked_id(transfer_id, "transfer_id", uri))
        return await read(link(ctx), lambda c: c.transfer(req), uri)
