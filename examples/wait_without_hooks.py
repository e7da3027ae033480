"""(e) Wait for fedhpc work without hooks: any MCP client, the Tasks extension (docs/mcp.md).

`call_tool("submit_task", ...)` returns the job's final result: the client declares the
extension, takes the task handle, listens for it and ends at its terminal notification. It
sends no tasks/get and no get_result; nothing polls.

    python examples/wait_without_hooks.py
"""

from __future__ import annotations

import os
import sys
from typing import Any, Literal

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.extension import ClaimContext, ClientExtension, NotificationBinding, ResultClaim
from mcp.types import CallToolResult, Result, SubscriptionsListenRequest, SubscriptionsListenResult
from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class TaskHandle(Result):  # CreateTaskResult: a task in lieu of the tool's result
    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = "task"
    task_id: str


class Status(BaseModel):  # notifications/tasks: the task, with its result once it ends
    model_config = ConfigDict(extra="allow", alias_generator=to_camel)
    task_id: str
    status: str
    result: dict[str, Any] | None = None


class Tasks(ClientExtension):
    identifier = "io.modelcontextprotocol/tasks"

    def __init__(self) -> None:
        self.send, self.received = anyio.create_memory_object_stream[Status](64)

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=TaskHandle, resolve=self.wait)]

    def notifications(self) -> list[NotificationBinding[Any]]:
        return [
            NotificationBinding(
                method="notifications/tasks", params_type=Status, handler=self.send.send
            )
        ]

    async def wait(self, task: TaskHandle, ctx: ClaimContext) -> CallToolResult:
        watch = {"notifications": {"taskIds": [task.task_id]}}
        listen = SubscriptionsListenRequest.model_validate({"params": watch})
        async with anyio.create_task_group() as tg:
            tg.start_soon(ctx.session.send_request, listen, SubscriptionsListenResult, 86400)
            async for note in self.received:
                if note.task_id == task.task_id and note.status != "working":
                    tg.cancel_scope.cancel()
                    return CallToolResult.model_validate(note.result or {"content": []})
        raise RuntimeError("the notification stream ended")


async def main() -> None:
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "fedhpc.mcp_server"], env=dict(os.environ)
    )
    envelope = {"gpus": {"min": 0, "max": 0}, "cpus": {"min": 1}, "wall_time": {"min": "5m"}}
    async with Client(server, extensions=[Tasks()]) as client:
        result = await client.call_tool(
            "submit_task", {"command": ["echo", "hello"], "envelope": envelope}
        )
    print(result.content[0].text)  # get_result's compact answer, as the job ended


if __name__ == "__main__":
    anyio.run(main)
