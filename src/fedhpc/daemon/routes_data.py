"""REST handlers of the data operations: POST /v1/transfers (move_data), GET /v1/transfers/{id}."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from fedhpc.daemon import api
from fedhpc.daemon.api import Endpoint
from fedhpc.daemon.guard import Handler, model_response
from fedhpc.daemon.limits import read_body
from fedhpc.daemon.owner import principal
from fedhpc.daemon.state import DaemonState
from fedhpc.errors import UsageError
from fedhpc.ops.data import MoveDataRequest, TransferRequest
from fedhpc.ops.hints import blocked_hint
from fedhpc.transfer.service import TransferService

__all__ = ["handlers"]

_MAX_BODY = 100_000  # references and options only: data never travels through the API


def handlers(state: DaemonState) -> dict[Endpoint, Handler]:
    """The handlers; `state.transfers` is the daemon's TransferService."""

    def service() -> TransferService:
        if state.transfers is None:
            raise UsageError(
                "this daemon runs no transfer service", hint="Upgrade and restart the daemon."
            )
        return state.transfers

    async def move_data(request: Request) -> Response:
        req = MoveDataRequest.model_validate_json(await read_body(request, _MAX_BODY))
        handle = await service().move_data(req, owner=principal(request).owner)
        orchestrator = state.orchestrator
        if req.continuation is not None and not handle.state.terminal:
            why = orchestrator.resume_blocker(req.continuation.runtime.value)
            if why:  # its continuation is stored, but nothing can wake the agent now
                read = f"read resource fedhpc://transfers/{handle.transfer_id}"
                handle = handle.model_copy(update={"next": blocked_hint(why, read)})
        return model_response(handle)

    async def transfer(request: Request) -> Response:
        q = dict(request.query_params)
        if "preview" in q:
            q["preview"] = str(q["preview"] in {"1", "true"}).lower()
        req = TransferRequest.model_validate(
            {"transfer_id": request.path_params["transfer_id"], **q}
        )
        await principal(request).check(state.store, req.transfer_id, "transfer")
        return model_response(await service().view(req))

    return {api.MOVE_DATA: move_data, api.TRANSFER: transfer}
