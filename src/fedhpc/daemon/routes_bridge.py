"""REST routes of the resume bridge: continuations, hook-reported sessions, deliveries."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fedhpc.ops.continuations import ContinuationSpec, DeliveryView, SessionReport
from fedhpc.orchestrator import TaskNotFound
from fedhpc.transfer.errors import TransferNotFound

if TYPE_CHECKING:
    from fedhpc.daemon.app import DaemonState

__all__ = ["RegisterContinuation", "bridge_routes"]

Handler = Callable[[Request], Awaitable[Response]]


class RegisterContinuation(BaseModel):
    """POST /v1/continuations: wake `spec` for events of an existing task, group or transfer."""

    model_config = ConfigDict(extra="forbid")

    subject: str = Field(min_length=1, max_length=64)
    spec: ContinuationSpec


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

    async def session(request: Request) -> Response:
        rep = SessionReport.model_validate_json(await body(request))
        async with state.store.transaction() as tx:
            await tx.put_session(runtime=rep.runtime.value, cwd=rep.cwd,
                                 session_id=rep.session_id, body=rep.model_dump(mode="json"),
                                 at=datetime.now(UTC))  # fmt: skip
        return JSONResponse({"ok": True})

    async def deliveries(request: Request) -> Response:
        wanted = [s for s in request.query_params.getlist("state") if s]
        rows = await state.store.deliveries(states=wanted, limit=500)
        views = [
            DeliveryView(
                id=d["id"], event_id=d["event_id"], continuation_id=d["continuation_id"],
                runtime=d["body"]["runtime"], state=d["state"], attempts=d["attempts"],
                last_error=d["body"].get("last_error"),
                updated_at=datetime.fromisoformat(d["updated_at"]),
                payload_bytes=len(json.dumps(d["body"]["payload"], separators=(",", ":"))),
            ).model_dump(mode="json")
            for d in rows
        ]  # fmt: skip
        return JSONResponse({"deliveries": views})

    return [
        Route("/v1/continuations", guard(register), methods=["POST"]),
        Route("/v1/sessions", guard(session), methods=["POST"]),
        Route("/v1/deliveries", guard(deliveries), methods=["GET"]),
    ]
