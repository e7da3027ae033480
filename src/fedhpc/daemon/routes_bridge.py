"""REST handlers of the resume bridge: continuations, hook-reported tool-call bindings,
deliveries (list, redrive)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from fedhpc.daemon import api
from fedhpc.daemon.api import Endpoint, Redrive, RegisterContinuation
from fedhpc.daemon.guard import Handler
from fedhpc.daemon.limits import read_body
from fedhpc.daemon.owner import principal
from fedhpc.daemon.state import DaemonState
from fedhpc.errors import ErrorKind, UsageError
from fedhpc.ops.continuations import DeliveryView, ToolBinding
from fedhpc.orchestrator import TaskNotFound
from fedhpc.transfer.errors import TransferNotFound

__all__ = ["delivery_view", "handlers"]

BINDING_KEEP = timedelta(days=1)


class BindingNotFound(UsageError):
    code = "not_found"
    kind = ErrorKind.NOT_FOUND


def delivery_view(d: dict[str, Any]) -> DeliveryView:
    b = d["body"]
    spec = b.get("spec") or {}
    return DeliveryView(
        id=d["id"],
        event_id=d["event_id"],
        continuation_id=d["continuation_id"],
        runtime=b["runtime"],
        state=d["state"],
        attempts=d["attempts"],
        last_error=b.get("last_error"),
        updated_at=datetime.fromisoformat(d["updated_at"]),
        payload_bytes=len(json.dumps(b["payload"], separators=(",", ":")).encode()),
        event=b.get("kind"),
        subject=b.get("subject"),
        session=f"{b['runtime']}:{spec['session_id']}" if spec.get("session_id") else None,
        resume=b.get("resume"),
        tools_verified=b.get("tools_verified"),
    )


def handlers(state: DaemonState) -> dict[Endpoint, Handler]:
    o = state.orchestrator

    async def is_transfer(subject: str) -> bool:
        if state.transfers is None:
            return False
        try:
            await state.transfers.load(subject)
        except TransferNotFound:
            return False
        return True

    async def register(request: Request) -> Response:
        req = RegisterContinuation.model_validate_json(await read_body(request))
        scope = principal(request).scope
        theirs = scope is not None and any(
            exists and owner != scope
            for exists, owner in [
                await state.store.owner_of(t, req.subject) for t in ("tasks", "groups", "transfers")
            ]
        )
        if (
            theirs  # another person's (service mode): as if it did not exist
            or (
                await state.store.get_task(req.subject) is None
                and await state.store.get_group(req.subject) is None
                and not await is_transfer(req.subject)
            )
        ):
            raise TaskNotFound(
                f"no task, group or transfer {req.subject!r}",
                hint="A continuation wakes for an id this daemon gave: the task_id, group_id "
                "or transfer_id in a submit_task, submit_group or move_data answer.",
            )
        cid = await o.book.register(req.subject, req.spec)
        return JSONResponse({"id": cid, "subject": req.subject})

    async def bind(request: Request) -> Response:
        rep = ToolBinding.model_validate_json(await read_body(request))
        now = datetime.now(UTC)
        async with state.store.transaction() as tx:
            await tx.put_binding(
                tool_use_id=rep.tool_use_id,
                session_id=rep.session_id,
                body=rep.model_dump(mode="json"),
                at=now,
                keep_after=now - BINDING_KEEP,
            )
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
        scope = principal(request).scope
        rows = await state.store.deliveries(states=wanted, limit=500, owner=scope)
        return JSONResponse(
            {"deliveries": [delivery_view(d).model_dump(mode="json") for d in rows]}
        )

    async def redrive(request: Request) -> Response:
        req = Redrive.model_validate_json(await read_body(request))
        if not req.ids and not req.all_dead:
            raise UsageError("name deliveries to retry", hint="Pass ids, or all_dead.")
        if state.bridge is None:
            raise UsageError("this daemon runs no resume bridge")
        scope = principal(request).scope
        if scope is None:
            done = await state.bridge.redrive(None if req.all_dead else req.ids)
        else:  # service mode: only the caller's own dead deliveries
            own = {d["id"] for d in await state.store.deliveries(states=["dead"], owner=scope)}
            done = await state.bridge.redrive(
                sorted(own) if req.all_dead else [i for i in req.ids if i in own]
            )
        missing = [i for i in req.ids if i not in done]
        return JSONResponse({"retried": done, "not_dead": missing})

    return {
        api.REGISTER_CONTINUATION: register,
        api.REPORT_BINDING: bind,
        api.BINDING: binding,
        api.DELIVERIES: deliveries,
        api.RETRY_DELIVERIES: redrive,
    }
