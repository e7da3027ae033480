"""A Tasks-extension client on the MCP Python SDK (mcp 2.3 carries the types, not the client
behaviour): it declares `io.modelcontextprotocol/tasks`, takes `resultType: "task"` answers
as they are, listens with `taskIds` and collects `notifications/tasks`, counting every
request it sends by method."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

import anyio
from mcp import Client
from mcp.client.extension import ClientExtension, NotificationBinding, ResultClaim
from mcp.types import (
    CallToolResult,
    Request,
    RequestParams,
    ResourceUpdatedNotification,
    Result,
    SubscriptionFilter,
    SubscriptionsAcknowledgedNotification,
    SubscriptionsListenRequest,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
)
from pydantic import BaseModel, ConfigDict

EXTENSION = "io.modelcontextprotocol/tasks"


class _Answer(BaseModel):
    """A request's answer as the server sent it: every field kept, none checked."""

    model_config = ConfigDict(extra="allow")


class CreatedTask(Result):
    """`CreateTaskResult`: a Task in lieu of the tool's result."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    poll_interval_ms: int | None = None
    status_message: str | None = None


class TaskNote(BaseModel):
    model_config = ConfigDict(extra="allow")


class _TaskParams(RequestParams):
    task_id: str


class _TaskRequest(Request[_TaskParams, str]):
    method: str
    params: _TaskParams
    name_param = "taskId"


async def _unresolved(created: CreatedTask, _: Any) -> CallToolResult:
    raise RuntimeError(f"call with allow_claimed=True; got task {created.task_id}")


class Tasks(ClientExtension):
    identifier = EXTENSION

    def __init__(self) -> None:
        self.notes: list[dict[str, Any]] = []
        self.arrived = anyio.Event()

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=_unresolved)]

    def notifications(self) -> list[NotificationBinding[Any]]:
        return [
            NotificationBinding(
                method="notifications/tasks", params_type=TaskNote, handler=self._on
            )
        ]

    async def _on(self, note: TaskNote) -> None:
        self.notes.append(note.model_dump(by_alias=True))
        self.arrived.set()
        self.arrived = anyio.Event()

    async def terminal(self, task_id: str) -> dict[str, Any]:
        """Wait for the notification that ends `task_id` (no request is sent)."""
        while True:
            for note in self.notes:
                if note.get("taskId") == task_id and note.get("status") != "working":
                    return note
            await self.arrived.wait()


class Counted:
    """The SDK client with the extension, and a count of the requests sent per method."""

    def __init__(self, client: Client, tasks: Tasks) -> None:
        self.client, self.tasks, self.sent = client, tasks, Counter[str]()
        self.updated: list[str] = []  # resources/updated URIs, in order
        self.acked = anyio.Event()  # the open stream's acknowledgment arrived

    async def call(self, tool: str, args: dict[str, Any]) -> CreatedTask | CallToolResult:
        self.sent["tools/call:" + tool] += 1
        answer = await self.client.session.call_tool(tool, args, allow_claimed=True)
        assert isinstance(answer, CreatedTask | CallToolResult), answer  # the one claim: tasks
        return answer

    async def task_request(self, method: str, task_id: str) -> dict[str, Any]:
        self.sent[method] += 1
        req = _TaskRequest(method=method, params=_TaskParams(task_id=task_id))
        answer = await self.client.session.send_request(req, _Answer)
        return answer.model_dump()

    @asynccontextmanager
    async def listen(self, *task_ids: str, uris: tuple[str, ...] = ()) -> AsyncIterator[None]:
        """A `subscriptions/listen` stream for these tasks (and resources), open (the server
        acknowledged it) when the block starts, while the block runs."""
        self.sent["subscriptions/listen"] += 1
        asked: dict[str, Any] = {"taskIds": list(task_ids)} if task_ids else {}
        if uris:
            asked["resourceSubscriptions"] = list(uris)
        wanted = SubscriptionFilter.model_validate(asked)
        req = SubscriptionsListenRequest(
            params=SubscriptionsListenRequestParams(notifications=wanted)
        )
        async with anyio.create_task_group() as tg:

            async def stream() -> None:
                await self.client.session.send_request(req, SubscriptionsListenResult, 3600)

            self.acked = anyio.Event()
            tg.start_soon(stream)
            with anyio.fail_after(60):
                await self.acked.wait()
            yield
            tg.cancel_scope.cancel()


@asynccontextmanager
async def tasks_client(server: Any, **kw: Any) -> AsyncIterator[Counted]:
    tasks = Tasks()
    updated: list[str] = []

    counted: Counted | None = None

    async def on_message(message: Any) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            updated.append(message.params.uri)
        elif isinstance(message, SubscriptionsAcknowledgedNotification) and counted is not None:
            counted.acked.set()

    async with Client(server, extensions=[tasks], message_handler=on_message, **kw) as client:
        counted = Counted(client, tasks)
        counted.updated = updated
        yield counted
