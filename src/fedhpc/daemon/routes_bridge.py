"""REST routes of the resume bridge: continuations, hook-reported tool-call bindings,
deliveries (list, redrive)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fedhpc.errors import ErrorKind, UsageError
from fedhpc.ops.continuations import ContinuationSpec, DeliveryView, ToolBinding
from fedhpc.orchestrator import TaskNotFound
from fedhpc.transfer.errors import TransferNotFound

if TYPE_CHECKING:
    from fedhpc.daemon.app import DaemonState

__all__ = ["Redrive", "RegisterContinuation", "bridge_routes", "delivery_view"]

BINDING_KEEP = timedelta(days=1)

Handler = Callable[[Request], Awaitable[Response]]


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


class BindingNotFound(UsageError):
    code = "not_found"
    kind = ErrorKind.NOT_FOUND


def delivery_view(d: dict[str, Any]) -> DeliveryView:
    b = d["body"]
    spec = b.get("spec") or {}
    return DeliveryView(
        id=d["id"], event_id=d["event_id"], continuation_id=d["continuation_id"],
        runtime=b["runtime"], state=d["state"], attempts=d["attempts"],
        last_error=b.get("last_error"), updated_at=datetime.fromisoformat(d["updated_at"]),
        payload_bytes=len(json.dumps(b["payload"], separators=(",", ":")).encode()),
        event=b.get("kind"), subject=b.get("subject"),
        session=f"{b['runtime']}:{spec['session_id']}" if spec.get("session_id") else None,
        resume=b.get("resume"), tools_verified=b.get("tools_verified"),
    )  # fmt: skip


def bridge_routes(
    state: DaemonState,
    *,
    guard: Callable[[Handler], Handler],
    read_body: Callable[[Request], Awaitable[bytes]],
) -> list[Route]:
    o = state.orchestrator
    body = read_body

    async def is_transfer(subject: str) -> bool:
        if state.transfers is None:
            return False
        try:
            await state.transfers.load(subject)
        except TransferNotFound:
            return False
        return True

    async def register(request: Request) -> Response:
        req = RegisterContinuation.model_validate_json(await body(request))
        if (
            await state.store.get_task(req.subject) is None
            and await state.store.get_group(req.subject) is None
            and not await is_transfer(req.subject)
        ):
            raise TaskNotFound(f"no task, group or transfer {req.subject!r}")
        cid = await o.register(req.subject, req.spec)
        return JSONResponse({"id": cid, "subject": req.subject})

    async def bind(request: Request) -> Response:
        rep = ToolBinding.model_validate_json(await body(request))
        now = datetime.now(UTC)
        async with state.store.transaction() as tx:
            await tx.put_binding(tool_use_id=rep.tool_use_id, session_id=rep.session_id,
                                 body=rep.model_dump(mode="json"), at=now,
                                 keep_after=now - BINDING_KEEP)  # fmt: skip
        return JSONResponse({"ok": True})

    async def binding(request: Request) -> Response:
        tool_use_id = request.path_params["tool_use_id"]
        found = await state.store.binding(tool_use_id)
        if found is None:
            raise BindingNotFound(
                f"no session reported for tool call {tool_use_id[:80]!r}",
                hint="Install fedhpc's PreToolUse hook (docs/continuation.md).",
            )
        return JSONResponse(ToolBinding.model_validate(found).model_dump(mode="json"))

    async def deliveries(request: Request) -> Response:
        wanted = [s for s in request.query_params.getlist("state") if s]
        rows = await state.store.deliveries(states=wanted, limit=500)
        return JSONResponse({"deliveries": [delivery_view(d).model_dump(mode="json")
                                            for d in rows]})  # fmt: skip

    async def redrive(request: Request) -> Response:
        req = Redrive.model_validate_json(await body(request))
        if not req.ids and not req.all_dead:
            raise UsageError("name deliveries to retry", hint="Pass ids, or all_dead.")
        if state.bridge is None:
            raise UsageError("this daemon runs no resume bridge")
        done = await state.bridge.redrive(None if req.all_dead else req.ids)
        missing = [i for i in req.ids if i not in done]
        return JSONResponse({"retried": done, "not_dead": missing})

    return [
        Route("/v1/continuations", guard(register), methods=["POST"]),
        Route("/v1/bindings", guard(bind), methods=["POST"]),
        Route("/v1/bindings/{tool_use_id}", guard(binding), methods=["GET"]),
        Route("/v1/deliveries", guard(deliveries), methods=["GET"]),
        Route("/v1/deliveries/retry", guard(redrive), methods=["POST"]),
    ]
