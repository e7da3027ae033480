"""The daemon's typed REST app (starlette), served on a Unix socket: the route table of
daemon/api.py, each route's handler from its routes_* module, every one under the one guard."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Match, Route

from fedhpc.daemon import (
    api,
    routes_bridge,
    routes_data,
    routes_events,
    routes_federation,
    routes_history,
    routes_ledger,
    routes_tasks,
)
from fedhpc.daemon.guard import guard, status_of
from fedhpc.daemon.state import DaemonState
from fedhpc.errors import NotFound, UsageError

__all__ = ["MethodNotAllowed", "UnknownRoute", "build_app"]

_ROUTES_HINT = (
    "The daemon's routes are the table in docs/daemon.md (GET /v1/health answers when it is "
    "up); the fedhpc CLI and MCP server call them for you."
)


class UnknownRoute(NotFound):
    """A path the daemon does not serve."""

    code = "unknown_route"
    default_hint = _ROUTES_HINT


class MethodNotAllowed(UsageError):
    """A served path asked with a method it does not take: answered 405 with `Allow`, the one
    status HTTP requires here (its kind, usage, is 400 elsewhere)."""

    code = "method_not_allowed"
    default_hint = _ROUTES_HINT


_MODULES = (
    routes_bridge,
    routes_data,
    routes_events,
    routes_federation,
    routes_history,
    routes_ledger,
    routes_tasks,
)


def build_app(state: DaemonState) -> Starlette:
    """The app serving every route of `api.ROUTES`, in its order, and nothing else."""
    handlers = {e: h for m in _MODULES for e, h in m.handlers(state).items()}
    missing = [e.name for e in api.ROUTES if e not in handlers]
    extra = [e.name for e in handlers if e not in api.ROUTES]
    if missing or extra:
        raise RuntimeError(f"route table and handlers differ: missing {missing}, extra {extra}")
    routes = [
        Route(
            e.path,
            guard(handlers[e], state.request_times, f"{e.method} {e.path}"),
            methods=[e.method],
            name=e.name,
        )
        for e in api.ROUTES
    ]
    return Starlette(
        routes=routes, exception_handlers={404: _unknown_route, 405: _method_not_allowed}
    )


async def _unknown_route(request: Request, _: Exception) -> Response:
    """Starlette's own answer is a text/plain "Not Found": every answer here is typed JSON."""
    err = UnknownRoute(f"no route {request.method} {request.url.path}")
    return JSONResponse(err.as_dict(), status_code=status_of(err))


async def _method_not_allowed(request: Request, _: Exception) -> Response:
    """Every method the path takes (Starlette's `Allow` names only its first route's: `/v1/tasks`
    is two routes, GET and POST)."""
    methods: set[str] = set()
    for route in request.app.routes:
        if isinstance(route, Route) and route.matches(request.scope)[0] is not Match.NONE:
            methods |= route.methods or set()
    allowed = ", ".join(sorted(methods))
    err = MethodNotAllowed(f"{request.url.path} takes {allowed}, not {request.method}")
    return JSONResponse(err.as_dict(), status_code=405, headers={"Allow": allowed})
