"""REST routes of the data operations: POST /v1/transfers (move_data), GET /v1/transfers/{id}."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from fedhpc.daemon.limits import read_body
from fedhpc.errors import UsageError
from fedhpc.ops.data import MoveDataRequest, TransferRequest
from fedhpc.ops.hints import blocked_hint
from fedhpc.transfer.service import TransferService

__all__ = ["data_routes"]

_MAX_BODY = 100_000  # references and options only: data never travels through the API


def data_routes(state: object) -> list[Route]:
    """The routes; `state.transfers` is the daemon's TransferService."""
    from fedhpc.daemon.app import _guard, _json  # app imports this module: import at call time

    def service() -> TransferService:
        svc = getattr(state, "transfers", None)
        if not isinstance(svc, TransferService):
            raise UsageError("this daemon runs no transfer service",
                             hint="Upgrade and restart the daemon.")  # fmt: skip
        return svc

    async def move_data(request: Request) -> Response:
        req = MoveDataRequest.model_validate_json(await read_body(request, _MAX_BODY))
        handle = await service().move_data(req)
        orchestrator = getattr(state, "orchestrator", None)
        if req.continuation is not None and not handle.state.terminal and orchestrator:
            why = orchestrator.resume_blocker(req.continuation.runtime.value)
            if why:  # its continuation is stored, but nothing can wake the agent now
                read = f"read resource fedhpc://transfers/{handle.transfer_id}"
                handle = handle.model_copy(update={"next": blocked_hint(why, read)})
        return _json(handle)

    async def transfer(request: Request) -> Response:
        q = dict(request.query_params)
        if "preview" in q:
            q["preview"] = str(q["preview"] in {"1", "true"}).lower()
        req = TransferRequest.model_validate(
            {"transfer_id": request.path_params["transfer_id"], **q}
        )
        return _json(await service().view(req))

    return [
        Route("/v1/transfers", _guard(move_data), methods=["POST"]),
        Route("/v1/transfers/{transfer_id}", _guard(transfer), methods=["GET"]),
    ]
